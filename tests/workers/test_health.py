"""``manage.py workerflow health`` and the fast sweeper chain that is the workers' heartbeat."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone
from django_q.models import OrmQ
from django_q.signing import SignedPackage

import django_workerflow as workerflow
from django_workerflow.models import WorkerHeartbeat, WorkflowInstance
from django_workerflow.runtime import sweeping
from django_workerflow.workers import sweep_chain

pytestmark = pytest.mark.django_db


def health(*args: str) -> tuple[str, int]:
    out = StringIO()
    try:
        call_command("workerflow", "health", *args, stdout=out)
    except CommandError as exc:
        return str(exc), exc.returncode
    return out.getvalue(), 0


def reported(seconds_ago: float) -> None:
    WorkerHeartbeat.objects.update_or_create(
        queue="workerflow",
        defaults={"beat_at": timezone.now() - timedelta(seconds=seconds_ago)},
    )


def links() -> list[str]:
    """The queued links of the sweeper chain (their due times)."""
    payloads = OrmQ.objects.order_by("id").values_list("payload", flat=True)
    tasks = [SignedPackage.loads(payload) for payload in payloads]
    return [task["args"][0] for task in tasks if task["func"] == sweep_chain.BEAT_TASK]


def test_health__passes_when_a_cluster_reported_and_no_bell_is_late(db):
    reported(5)
    output, code = health()
    assert code == 0
    assert output.startswith("OK: no bell overdue by more than 60 s; last report 5 s ago.")


def test_health__fails_when_no_cluster_ever_reported(db):
    output, code = health()
    assert code == 1
    assert output == (
        "UNHEALTHY: no cluster has ever reported. The workers are down, overloaded or "
        "wedged: restart the cluster."
    )


def test_health__fails_when_the_last_report_is_older_than_the_lag(db):
    reported(90)
    assert health()[1] == 1
    assert "no cluster has reported for 90 s" in health()[0]
    assert health("--max-lag", "120")[1] == 0


def test_health__fails_when_bells_are_overdue(define):
    reported(1)
    definition = define(lambda self: self.sleep("nap", 10))
    for key in ("late-1", "late-2", "on-time"):
        workerflow.start(definition, key=key)
    now = timezone.now()
    WorkflowInstance.objects.filter(key="late-1").update(alarm_at=now - timedelta(seconds=125))
    WorkflowInstance.objects.filter(key="late-2").update(alarm_at=now - timedelta(seconds=70))
    output, code = health()
    assert code == 1
    assert output.startswith("UNHEALTHY: 2 bells overdue, the oldest by 125 s (more than 60 s)")
    assert "1 bell overdue" in health("--max-lag", "100")[0]
    WorkflowInstance.objects.filter(key__startswith="late").update(status="paused")
    assert health()[1] == 0  # a paused instance has no bell to be late for


@pytest.mark.parametrize("bad", ["0", "-5", "soon", "inf"])
def test_health__refuses_a_max_lag_that_is_not_a_positive_number(db, bad):
    with pytest.raises(CommandError, match="expected a number of seconds above 0"):
        call_command("workerflow", "health", "--max-lag", bad)


def test_heartbeat__one_chain_per_queue(db):
    assert sweep_chain.beat(None).continues is True  # no chain yet: seeded
    row = WorkerHeartbeat.objects.get()
    assert links() == [row.next_beat_at.isoformat()]
    assert sweep_chain.beat(None).continues is False  # the chain is alive: a reseed does nothing
    assert len(links()) == 1
    assert (
        sweep_chain.beat(row.next_beat_at - timedelta(seconds=1)).continues is False
    )  # a stale link
    assert len(links()) == 1
    assert sweep_chain.beat(row.next_beat_at).continues is True  # the current link continues it
    assert len(links()) == 2
    assert WorkerHeartbeat.objects.get().next_beat_at > row.next_beat_at


def test_heartbeat__a_broken_chain_is_reseeded(db):
    sweep_chain.beat(None)
    WorkerHeartbeat.objects.update(next_beat_at=timezone.now() - timedelta(minutes=5))
    assert sweep_chain.beat(None).continues is True
    assert len(links()) == 2


def test_sweep__rings_an_instance_whose_lease_expired_at_once(define):
    definition = define(lambda self: self.sleep("nap", 10))
    instance = workerflow.start(definition, key="orphaned")
    now = timezone.now()
    # A worker died holding the lease a second ago: no bell rings for its lease expiry.
    WorkflowInstance.objects.filter(pk=instance.pk).update(
        status="running",
        lease_token="dead",
        lease_expires_at=now - timedelta(seconds=1),
        alarm_at=now - timedelta(seconds=1),
        bell_at=None,
    )
    assert sweeping.sweep() == 1
    # Not rung again while that bell may still wait in the queue.
    assert sweeping.sweep() == 0
