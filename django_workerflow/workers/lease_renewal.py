"""Lease renewal: renew the leases of the ticks running in this process.

Step writes renew the lease too; the renewal thread covers a callback that runs longer than the
lease, which would otherwise let a second worker take the instance over. One daemon thread
per process serves every tick running in it, each renewed every third of the lease: a
thread started and joined per tick cost about a fifth of a short workflow's tick in a
worker (measured with py-spy on a 500-workflow fleet).

The thread needs the GIL: while a callback holds it in one C call (a pathological ``re``
match, big-integer arithmetic; not ``time.sleep``, ``hashlib`` or ``zlib``, which release
it), no renewal runs. A hold shorter than two thirds of the lease is absorbed (the renewal
runs when the call returns); a longer one lets the lease expire, and the fence then keeps the
first worker from writing past its step (``docs/operations.md#leases-and-crash-recovery``).
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import threading
import time
from types import TracebackType

from django.db import DatabaseError, connection

from django_workerflow.conf import settings
from django_workerflow.store.lease import Lease
from django_workerflow.values.clock import now as clock_now

logger = logging.getLogger(__name__)


class _Renewer:
    """The process's renewal thread and the leases it renews."""

    def __init__(self) -> None:
        self._wakeup = threading.Condition()
        # handle -> (lease, when it is next renewed, on the monotonic clock)
        self._leases: dict[int, tuple[Lease, float]] = {}
        self._handles = itertools.count()
        self._thread: threading.Thread | None = None
        self._pid = 0
        # When the thread wakes next by itself (infinity: when a tick starts).
        self._wakes_at = math.inf

    def add(self, lease: Lease) -> int:
        with self._wakeup:
            self._start_thread()
            handle = next(self._handles)
            renew_at = time.monotonic() + settings.LEASE_SECONDS / 3
            self._leases[handle] = (lease, renew_at)
            if renew_at < self._wakes_at:
                # Otherwise the thread wakes early enough by itself: waking it for every
                # tick cost a worker about 5 % of a short tick.
                self._wakeup.notify()
            return handle

    def remove(self, handle: int) -> None:
        with self._wakeup:
            self._leases.pop(handle, None)

    def _start_thread(self) -> None:
        # A forked worker inherits the object but not the thread: start its own.
        if self._thread is not None and self._thread.is_alive() and self._pid == os.getpid():
            return
        self._pid = os.getpid()
        self._thread = threading.Thread(target=self._run, name="workerflow-lease", daemon=True)
        self._thread.start()

    def _due(self) -> list[tuple[int, Lease]] | None:
        """Wait until a lease is due for renewal; return the due ones, rescheduled (None:
        no tick is running)."""
        with self._wakeup:
            while self._leases:
                now = time.monotonic()
                due = [(h, lease) for h, (lease, at) in self._leases.items() if at <= now]
                if due:
                    period = settings.LEASE_SECONDS / 3
                    for handle, lease in due:
                        self._leases[handle] = (lease, now + period)
                    return due
                self._wakes_at = min(at for _lease, at in self._leases.values())
                self._wakeup.wait(self._wakes_at - now)
            return None

    def _run(self) -> None:
        while True:
            due = self._due()
            if due is None:
                connection.close()  # no tick is running: hold no connection meanwhile
                with self._wakeup:
                    self._wakes_at = math.inf
                    while not self._leases:
                        self._wakeup.wait()
                continue
            for handle, lease in due:
                self._renew(handle, lease)

    def _renew(self, handle: int, lease: Lease) -> None:
        try:
            renewed = lease.renew_alone(clock_now())
        except DatabaseError:
            # The database went away (a restart, a failover): the lease is still ours until
            # it expires, so reconnect and renew at the next beat.
            logger.warning("lease renewal failed instance=%s", lease.instance_pk)
            connection.close()
            return
        except Exception:
            logger.exception("lease renewal raised instance=%s", lease.instance_pk)
            return
        if renewed:
            return
        with self._wakeup:
            # A tick that just ended released its lease: only a running tick's loss counts.
            lost = self._leases.pop(handle, None) is not None
        if lost:
            logger.warning("lease lost instance=%s", lease.instance_pk)


_renewer = _Renewer()


class LeaseRenewal:
    """Renew the lease every third of its length until the tick ends (a context manager)."""

    def __init__(self, instance_pk: int, token: str) -> None:
        self.lease = Lease(instance_pk, token)
        self._handle: int | None = None

    def __enter__(self) -> LeaseRenewal:
        self._handle = _renewer.add(self.lease)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._handle is not None:
            _renewer.remove(self._handle)
