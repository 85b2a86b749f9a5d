"""The engine's clock: every timestamp the engine writes comes from here.

The test harness swaps in a :class:`VirtualClock`; nothing else reads the system time.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.utils import timezone


class SystemClock:
    """Wall-clock time in UTC."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class VirtualClock:
    """A clock that only moves when told to; used by :class:`~django_workerflow.testing.Harness`."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime.now(UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, delta: timedelta) -> datetime:
        with self._lock:
            self._now += delta
            return self._now


_clock: SystemClock | VirtualClock = SystemClock()


def get_clock() -> SystemClock | VirtualClock:
    return _clock


def set_clock(clock: SystemClock | VirtualClock) -> SystemClock | VirtualClock:
    """Install ``clock`` and return the one it replaces."""
    global _clock
    previous, _clock = _clock, clock
    return previous


def in_project_time(moment: datetime) -> datetime:
    """``moment`` (aware) as the project's own datetimes are, in Django's and django-q2's
    tables and in a ``TaskResult``: aware with ``USE_TZ``, naive in ``TIME_ZONE`` without."""
    if settings.USE_TZ or timezone.is_naive(moment):
        return moment
    return timezone.make_naive(moment)


def now() -> datetime:
    """The current time on the engine's clock (timezone-aware, UTC)."""
    return _clock.now()
