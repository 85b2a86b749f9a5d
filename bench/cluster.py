"""Scenario ``clusters``, with real ``manage.py qcluster`` processes: the fleet, the
latency and the idle cost.

Timestamps come from the engine's rows, written by the worker processes, so the figures
include the bell's queue wait, the claim and the replay. The clusters inherit this process's
environment (bench.settings, the database being measured).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from .common import REPO, Sizes, distribution, wait_until


class Cluster:
    """A ``manage.py qcluster`` subprocess in its own process group, logging to a file."""

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        self._log: IO[bytes] = log_path.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, str(REPO / "manage.py"), "qcluster"],
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def wait_running(self, timeout: float = 60) -> None:
        def running() -> bool:
            if self.process.poll() is not None:
                raise RuntimeError(f"qcluster exited early; see {self.log_path}.")
            return " running." in self.log_path.read_text(errors="replace")

        wait_until(running, timeout=timeout, what=f"the cluster logging to {self.log_path}")

    def stop(self) -> None:
        """SIGTERM to the main process only (the group can hang); kill the group if stuck."""
        try:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGTERM)
                try:
                    self.process.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(self.process.pid, signal.SIGKILL)
                    self.process.wait()
        finally:
            self._log.close()


@contextmanager
def running_cluster(log_path: Path) -> Iterator[Cluster]:
    cluster = Cluster(log_path)
    try:
        cluster.wait_running()
        yield cluster
    finally:
        cluster.stop()


def wait_finished(prefix: str, count: int, timeout: float = 300) -> None:
    """Wait until ``count`` instances keyed ``prefix*`` finished; all must have completed."""
    from django_workerflow.models import WorkflowInstance

    instances = WorkflowInstance.objects.filter(key__startswith=prefix)
    wait_until(
        lambda: instances.finished().count() >= count,
        timeout=timeout,
        what=f"{count} instances '{prefix}*' to finish",
    )
    unfinished = instances.exclude(status="completed").count()
    if unfinished:
        raise RuntimeError(f"{unfinished} instances '{prefix}*' did not complete.")


def warm_up(run: str) -> None:
    """Wait until the clusters executed work (the first tick of a worker imports things)."""
    from django_workerflow import start

    prefix = f"{run}-warmup-"
    for index in range(4):
        start("bench-steps", key=f"{prefix}{index}-{uuid.uuid4()}", input={"steps": 1})
    wait_finished(prefix, 4, timeout=60)


def seconds_between(later: datetime, earlier: datetime) -> float:
    return (later - earlier).total_seconds()


def attempts_started_at(steps: Any, attempt: int) -> dict[str, datetime]:
    """When attempt ``attempt`` of each of ``steps`` (a ``Step`` queryset) started, by its
    instance's key, read from the step history (first starts included). One query, whatever
    the number of steps."""
    from django_workerflow.models import StepEvent, StepEventType

    return dict(
        StepEvent.objects.filter(
            step__in=steps, type=StepEventType.ATTEMPT_STARTED, attempt_number=attempt
        ).values_list("instance__key", "recorded_at")
    )


# 4. Fleet -----------------------------------------------------------------------------


def fleet(run: str, sizes: Sizes) -> dict[str, Any]:
    """Release the fleet's instances in one transaction; run steps per second until the
    last one finished (its own ``finished_at``)."""
    from django.db import transaction
    from django.db.models import Max

    from django_workerflow import start
    from django_workerflow.models import WorkflowInstance
    from django_workerflow.values.clock import now

    prefix = f"{run}-fleet-"
    with transaction.atomic():
        for index in range(sizes.fleet_instances):
            start("bench-steps", key=f"{prefix}{index}", input={"steps": sizes.fleet_steps})
    released = now()
    wait_finished(prefix, sizes.fleet_instances, timeout=600)
    last = WorkflowInstance.objects.filter(key__startswith=prefix).aggregate(
        last=Max("finished_at")
    )["last"]
    steps = sizes.fleet_instances * sizes.fleet_steps
    elapsed = seconds_between(last, released)
    return {
        "instances": sizes.fleet_instances,
        "steps_each": sizes.fleet_steps,
        "steps": steps,
        "seconds": elapsed,
        "steps_per_second": steps / elapsed,
    }


# 5. Latency ---------------------------------------------------------------------------


def start_to_first_step(run: str, sizes: Sizes) -> list[float]:
    """From just before ``start()`` to the first step's attempt starting, one at a time."""
    from django_workerflow import start
    from django_workerflow.models import Step
    from django_workerflow.values.clock import now

    prefix = f"{run}-start-"
    sent: dict[str, datetime] = {}
    for index in range(sizes.starts):
        key = f"{prefix}{index}"
        sent[key] = now()
        start("bench-steps", key=key, input={"steps": 1})
        time.sleep(sizes.spacing)
    wait_finished(prefix, sizes.starts)
    started = attempts_started_at(
        Step.objects.filter(instance__key__startswith=prefix, step_id="step-0"), 1
    )
    return [seconds_between(started[key], sent[key]) for key in sent]


def event_to_resume(run: str, sizes: Sizes) -> list[float]:
    """From just before ``send_event()`` to the step after the wait starting."""
    from django_workerflow import send_event, start
    from django_workerflow.models import Step, WorkflowInstance
    from django_workerflow.values.clock import now

    keys = [f"{run}-event-{index}" for index in range(sizes.events)]
    for key in keys:
        start("bench-event", key=key)
    waiting = WorkflowInstance.objects.filter(
        key__in=keys, lease_token__isnull=True, steps__step_id="go"
    )
    wait_until(
        lambda: waiting.count() == len(keys), timeout=60, what="every instance to wait for 'go'"
    )
    sent: dict[str, datetime] = {}
    for key in keys:
        sent[key] = now()
        send_event(key, "go")
        time.sleep(sizes.spacing)
    wait_finished(f"{run}-event-", sizes.events)
    resumed = attempts_started_at(Step.objects.filter(instance__key__in=keys, step_id="after"), 1)
    return [seconds_between(resumed[key], sent[key]) for key in keys]


def timers(run: str, sizes: Sizes, workdir: Path) -> tuple[list[float], list[float]]:
    """Sleeps spread over ``sizes.sleep_range`` and retries after a 250 ms backoff, started
    interleaved at ``sizes.start_rate`` per second; seconds late of each (negative: early)."""
    from django_workerflow import start

    markers = workdir / f"{run}-retry-markers"
    markers.mkdir()
    low, high = sizes.sleep_range
    arrivals = sorted(
        [(index / sizes.sleeps, "sleep", index) for index in range(sizes.sleeps)]
        + [((index + 0.5) / sizes.retries, "retry", index) for index in range(sizes.retries)]
    )
    began = time.monotonic()
    for position, (_, kind, index) in enumerate(arrivals):
        time.sleep(max(began + position / sizes.start_rate - time.monotonic(), 0))
        if kind == "sleep":
            duration = low + (high - low) * index / max(sizes.sleeps - 1, 1)
            start("bench-sleep", key=f"{run}-sleep-{index}", input={"seconds": duration})
        else:
            start("bench-retry", key=f"{run}-retry-{index}", input={"dir": str(markers)})
    wait_finished(f"{run}-sleep-", sizes.sleeps)
    wait_finished(f"{run}-retry-", sizes.retries)
    return sleep_lateness(f"{run}-sleep-"), retry_lateness(f"{run}-retry-")


def sleep_lateness(prefix: str) -> list[float]:
    from django_workerflow.models import Step

    rows = Step.objects.filter(instance__key__startswith=prefix, step_id="nap").values_list(
        "resolved_at", "wake_at"
    )
    return [seconds_between(resolved, wake) for resolved, wake in rows]


def retry_lateness(prefix: str) -> list[float]:
    """Attempt 2's start minus the ``next_attempt_at`` attempt 1's failure set."""
    from django_workerflow.models import Step, StepEvent, StepEventType

    events = StepEvent.objects.filter(instance__key__startswith=prefix)
    due = dict(
        events.filter(type=StepEventType.ATTEMPT_FAILED, attempt_number=1).values_list(
            "instance__key", "next_attempt_at"
        )
    )
    started = attempts_started_at(
        Step.objects.filter(instance__key__startswith=prefix, step_id="flaky"), 2
    )
    return [seconds_between(started[key], due[key]) for key in due]


def latency(run: str, sizes: Sizes, workdir: Path) -> dict[str, Any]:
    sleeps, retries = timers(run, sizes, workdir)
    return {
        "start_to_first_step": distribution(start_to_first_step(run, sizes)),
        "event_to_resume": distribution(event_to_resume(run, sizes)),
        "sleep_lateness": distribution(sleeps),
        "retry_lateness": distribution(retries),
        "timer_lateness": distribution(sleeps + retries),
    }


# 6. Idle cost ---------------------------------------------------------------------------


def database_transactions() -> tuple[int, int]:
    """PostgreSQL: transactions this database committed or rolled back so far (each
    autocommit statement is one; a backend reports its counts within about a second, or up
    to 10 s later if it had reported less than a second before it went idle), and
    the autovacuum and autoanalyze runs of its tables (the server's own transactions)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT (SELECT xact_commit + xact_rollback FROM pg_stat_database "
            "WHERE datname = current_database()), (SELECT sum(autovacuum_count + "
            "autoanalyze_count) FROM pg_stat_all_tables)"
        )
        transactions, maintenance = cursor.fetchone()
        return int(transactions), int(maintenance or 0)


def idle_queries(clusters: int, sizes: Sizes) -> dict[str, Any]:
    """Transactions per second the clusters run while they have nothing to do but their
    own upkeep (bell polls, the sweeper and heartbeat, django-q2's scheduler), counted from
    ``pg_stat_database`` over ``sizes.idle_seconds``, less the autovacuum and autoanalyze
    runs meanwhile (after the scenarios' writes, the server's own work)."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return {}
    # The last work's acknowledgements, and the counts its backends report only after 10 s
    # idle: counted in the window, they inflated the figure (2.7/s with a 5 s wait where
    # the server's statement log showed 1.4/s).
    time.sleep(min(sizes.idle_seconds / 4, 12.0))
    before, maintenance_before = database_transactions()
    began = time.monotonic()
    time.sleep(sizes.idle_seconds)
    after, maintenance_after = database_transactions()
    seconds = time.monotonic() - began
    maintenance = maintenance_after - maintenance_before
    # Less the first count's own transaction.
    transactions = after - before - 1 - maintenance
    per_second = transactions / seconds
    return {
        "clusters": clusters,
        "seconds": seconds,
        "transactions": transactions,
        "autovacuum_runs": maintenance,
        "per_second": per_second,
        "per_cluster_per_second": per_second / clusters,
    }


# Both, with clusters started one after another ----------------------------------------


def with_clusters(sizes: Sizes, workdir: Path, progress: Any) -> dict[str, Any]:
    """Latency with one cluster; the fleet with one, then with each cluster added."""
    from django.conf import settings

    q = settings.Q_CLUSTER
    results: dict[str, Any] = {
        "q_cluster": {key: q.get(key) for key in ("workers", "poll", "orm", "timeout", "retry")},
        "fleet": {},
        "idle": {},
    }
    with ExitStack() as clusters:
        for count in range(1, max(sizes.fleet_clusters, sizes.idle_clusters) + 1):
            progress(f"starting qcluster {count}")
            clusters.enter_context(running_cluster(workdir / f"qcluster-{count}.log"))
            warm_up(f"c{count}")
            if count == 1:
                progress("latency with 1 cluster")
                results["latency"] = latency("c1", sizes, workdir)
            if count in (1, sizes.idle_clusters):
                progress(f"idle cost with {count} cluster(s)")
                results["idle"][str(count)] = idle_queries(count, sizes)
            if count <= sizes.fleet_clusters:
                progress(f"fleet with {count} cluster(s)")
                results["fleet"][str(count)] = fleet(f"c{count}", sizes)
        progress("stopping the clusters")
    return results
