"""The bell: tells a worker when an instance's alarm comes due.

``WorkflowInstance.alarm_at`` is the truth; a bell only prompts a tick, and every tick
re-reads the instance under a lock, so a late, early, duplicate or stale bell is harmless.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

_state = threading.local()


@contextmanager
def suppressed() -> Iterator[None]:
    """Ring no bells (the test harness drives ticks itself)."""
    previous = getattr(_state, "suppressed", False)
    _state.suppressed = True
    try:
        yield
    finally:
        _state.suppressed = previous


def is_suppressed() -> bool:
    return getattr(_state, "suppressed", False)


def arm(instance_pk: int, when: datetime) -> None:
    """Ring for ``instance_pk`` at ``when``; call inside the transaction that set the alarm."""
    if is_suppressed():
        return
