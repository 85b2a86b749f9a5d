"""The demo's log format: an exception in one line, not its whole traceback.

The tour fails an invoice on purpose; its traceback is on the instance's page (and in
``workerflow show KEY --traceback``), so the terminal only says what was raised.
"""

from __future__ import annotations

import logging
import traceback
from typing import Any


class OneLineExceptions(logging.Formatter):
    """A formatter that writes a record's exception as "ExceptionName: message" on the
    record's own line."""

    def formatException(self, ei: Any) -> str:
        kind, error = ei[0], ei[1]
        last = " ".join(traceback.format_exception_only(kind, error)[-1].split())
        return f"  ({last}; the traceback is on the instance's page)"

    def format(self, record: logging.LogRecord) -> str:
        return super().format(record).replace("\n  (", " (", 1)
