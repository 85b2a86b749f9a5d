"""Formatted tracebacks of failures, as the engine stores them: the user's frames, bounded.

The engine's own frames (this package's modules) are left out, so a traceback reads from
the workflow's ``execute()`` down to the line that raised. A traceback longer than
:data:`MAX_TRACEBACK_CHARS` keeps its head and its tail (where the raising line is), with a
marker in between. The text is made storable on both databases with
:func:`~django_workerflow.values.storable.safe_text` (NUL and lone surrogates escaped).
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

from django_workerflow.values.storable import safe_text

# Enough for a deep stack of user frames; an attempt row stays small.
MAX_TRACEBACK_CHARS = 16 * 1024
TRUNCATED_MARKER = "\n... [traceback truncated: {omitted} characters omitted] ...\n"

_PACKAGE_DIR = str(Path(__file__).resolve().parent.parent)


def format_user_traceback(exc: BaseException) -> str:
    """The traceback of ``exc`` (and the exceptions chained to it) without the engine's
    frames, bounded and storable."""
    summary = traceback.TracebackException.from_exception(exc)
    _drop_engine_frames(summary, set())
    return bounded(storable_text("".join(summary.format())))


def _drop_engine_frames(summary: traceback.TracebackException, seen: set[int]) -> None:
    if id(summary) in seen:
        return
    seen.add(id(summary))
    summary.stack = traceback.StackSummary.from_list(
        [frame for frame in summary.stack if not _is_engine_frame(frame.filename)]
    )
    for chained in (summary.__cause__, summary.__context__):
        if chained is not None:
            _drop_engine_frames(chained, seen)
    for group_member in getattr(summary, "exceptions", None) or ():
        _drop_engine_frames(group_member, seen)


def _is_engine_frame(filename: str) -> bool:
    try:
        path = str(Path(filename).resolve())
    except (OSError, ValueError):
        return False
    return path.startswith((_PACKAGE_DIR + "/", _PACKAGE_DIR + "\\"))


def bounded(text: str, limit: int = MAX_TRACEBACK_CHARS) -> str:
    """``text`` cut to about ``limit`` characters: its head, a marker, and its tail."""
    if len(text) <= limit:
        return text
    head = limit // 4
    tail = limit - head
    omitted = len(text) - head - tail
    return text[:head] + TRUNCATED_MARKER.format(omitted=omitted) + text[-tail:]


def storable_text(text: str) -> str:
    """``text`` as both databases store it: NUL and lone surrogates escaped."""
    return safe_text(text, max_length=sys.maxsize)  # bounded() cuts it afterwards
