"""Keeps a tick's lease alive from a background thread while the tick works."""

from __future__ import annotations

import logging
import threading
from datetime import timedelta
from types import TracebackType

from django.db import DatabaseError, connection

from .clock import now as clock_now
from .conf import settings
from .states import ACTIVE_STATUSES

logger = logging.getLogger(__name__)


class LeaseHeartbeat:
    """Renew the lease every third of its length until the tick ends.

    Step writes renew the lease too; the heartbeat covers a callback that runs longer than
    the lease, which would otherwise let a second worker take the instance over.
    """

    def __init__(self, instance_pk: int, token: str) -> None:
        self.instance_pk = instance_pk
        self.token = token
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"workerflow-lease-{instance_pk}", daemon=True
        )

    def __enter__(self) -> LeaseHeartbeat:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        from .models import WorkflowInstance

        seconds = settings.LEASE_SECONDS
        try:
            while not self._stop.wait(seconds / 3):
                expires = clock_now() + timedelta(seconds=seconds)
                leased = WorkflowInstance.objects.filter(
                    pk=self.instance_pk, lease_token=self.token
                )
                try:
                    renewed = leased.update(lease_expires_at=expires)
                    leased.filter(status__in=ACTIVE_STATUSES).update(alarm_at=expires)
                except DatabaseError:
                    # The database went away (a restart, a failover): the lease is still
                    # ours until it expires, so reconnect and renew at the next beat.
                    logger.warning("lease renewal failed instance=%s", self.instance_pk)
                    connection.close()
                    continue
                if not renewed:
                    logger.warning("lease lost instance=%s", self.instance_pk)
                    return
        except Exception:
            logger.exception("lease heartbeat failed instance=%s", self.instance_pk)
        finally:
            connection.close()
