"""Say plainly when this process loses the database and when it has it back.

The broker, the lease renewal and the ticks meet a database outage many times a second
(every poll, every acknowledgement, every tick). The log should not: each process logs one
WARNING line when it first fails to reach the database (with the error) and one INFO line
when a statement succeeds again (with how long the database was away), whatever the number
of retries in between. State is per process (a forked worker starts with its parent's, and
logs for itself from then on).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from time import monotonic

logger = logging.getLogger(__name__)

_lock = threading.Lock()
#: pid -> (monotonic time of the first failure, the database alias): this process's outage.
_lost_since: dict[int, tuple[float, str]] = {}
#: Called (in the process that noticed) when an outage ends.
_when_back: list[Callable[[], None]] = []


def when_back(callback: Callable[[], None]) -> None:
    """Call ``callback`` in each process that notices the database back after an outage
    (the sweeper's chain reseeds itself so). Registering the same callback again is a
    no-op."""
    if callback not in _when_back:
        _when_back.append(callback)


def lost(alias: str, error: BaseException) -> None:
    """Note that a statement on database ``alias`` failed with ``error`` (a connection
    error): the first one of an outage logs a WARNING line, the others nothing."""
    pid = os.getpid()
    with _lock:
        if pid in _lost_since:
            return
        _lost_since[pid] = (monotonic(), alias)
    logger.warning(
        "database unavailable: alias=%s pid=%s error=%s. Workers retry on their own; "
        'nothing is lost (docs/operations.md, "When the database goes away").',
        alias,
        pid,
        _one_line(error),
    )


def back() -> None:
    """Note that a statement succeeded: after an outage, log one INFO line saying so."""
    if not _lost_since:  # the common case, without the lock
        return
    pid = os.getpid()
    with _lock:
        since = _lost_since.pop(pid, None)
    if since is not None:
        began, alias = since
        logger.info(
            "database available again: alias=%s pid=%s away_seconds=%.1f",
            alias,
            pid,
            monotonic() - began,
        )
        for callback in _when_back:
            try:
                callback()
            except Exception:  # the outage may not be over: the next one logs it
                logger.warning("after the outage, %s raised", callback.__qualname__, exc_info=True)


def is_lost() -> bool:
    """Whether this process is in an outage (its last statement on the database failed)."""
    return os.getpid() in _lost_since


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return f"{type(error).__name__}: {text}"
