"""Timer precision, event latency and throughput with real qcluster processes.

    python -m bench.timers                 # PostgreSQL database "workerflow_bench"
    python -m bench.timers --db sqlite     # a SQLite file in a temp folder

The database is created afresh and migrated with ``manage.py migrate``; the clusters run
``manage.py qcluster`` with the test project's recommended ``Q_CLUSTER``. Everything is
measured with one cluster, then again with a second one added. Figures only: nothing is
asserted. Timestamps come from the engine's rows (written by the worker processes), so the
figures include the bell's queue wait, the claim and the replay.

- sleep lateness: a sleep step's ``resolved_at - wake_at``, for sleeps of 0.5-3 s started
  at a steady rate (``--rate``, interleaved with the retries);
- retry lateness: attempt 2's ``attempt_started`` minus attempt 1's ``next_attempt_at``
  (a 250 ms backoff);
- early: how many fired before they were due (must be 0);
- event to resume: from just before ``send_event()`` to the wait step's ``resolved_at``
  (stamped by the sender's own transaction) and to the next step's ``attempt_started``;
- throughput: instances of trivial run steps released in one transaction, run to the end;
- sleep lateness under load: sleeps started together with a second throughput burst.

``--conn-max-age`` sets Django's ``CONN_MAX_AGE`` for this process and the clusters (see
bench/settings.py); the default, 0, is Django's.

p99 is the nearest-rank percentile, so with fewer than 100 samples it is the maximum.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import IO, Any

REPO = Path(__file__).resolve().parent.parent


# Setup --------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.timers",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--db", choices=["postgres", "sqlite"], default="postgres")
    parser.add_argument("--pg-name", default="workerflow_bench")
    parser.add_argument("--sleeps", type=int, default=50, help="sleep instances (0.5-3 s)")
    parser.add_argument("--retries", type=int, default=20, help="retry instances (250 ms)")
    parser.add_argument("--rate", type=float, default=10, help="timer instances started per second")
    parser.add_argument("--events", type=int, default=30, help="instances waiting for an event")
    parser.add_argument("--instances", type=int, default=200, help="throughput instances")
    parser.add_argument("--steps", type=int, default=10, help="run steps per instance")
    parser.add_argument("--clusters", type=int, default=2, help="measure with 1..N clusters")
    parser.add_argument(
        "--conn-max-age", type=float, default=0, help="Django CONN_MAX_AGE in seconds"
    )
    return parser.parse_args(argv)


def prepare_database(args: argparse.Namespace, workdir: Path) -> str:
    """Point this process and its subprocesses at a fresh database; return its description."""
    os.environ.update(
        DJANGO_SETTINGS_MODULE="bench.settings",
        WORKERFLOW_BENCH_CONN_MAX_AGE=str(args.conn_max_age),
        WORKERFLOW_DB=args.db,
        PYTHONUNBUFFERED="1",
    )
    if args.db == "postgres":
        recreate_postgres_database(args.pg_name)
        os.environ["WORKERFLOW_PG_NAME"] = args.pg_name
        described = f"PostgreSQL database {args.pg_name!r}"
    else:
        path = workdir / "bench.sqlite3"
        os.environ["WORKERFLOW_SQLITE_PATH"] = str(path)
        described = f"SQLite {path} (WAL, IMMEDIATE)"
    subprocess.run(
        [sys.executable, str(REPO / "manage.py"), "migrate", "--verbosity", "0"],
        cwd=REPO,
        check=True,
    )
    return described


def recreate_postgres_database(name: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(
        host="127.0.0.1", port=5432, user="postgres", dbname="postgres", autocommit=True
    ) as conn:
        identifier = sql.Identifier(name)
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(identifier))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(identifier))


def setup_django() -> None:
    import logging

    import django

    django.setup()
    # start() and django-q2 log every instance and task; the figures are what this prints.
    logging.getLogger("django_workerflow").setLevel(logging.WARNING)
    logging.getLogger("django-q").setLevel(logging.WARNING)


# Clusters -----------------------------------------------------------------------------


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

    def wait_running(self, timeout: float = 30) -> None:
        wait_until(
            lambda: " running." in self.log_path.read_text(errors="replace"),
            timeout=timeout,
            what=f"the cluster logging to {self.log_path} to start",
        )

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


def wait_until(predicate: Callable[[], Any], *, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"Timed out after {timeout} s waiting for {what}.")
        time.sleep(0.05)


def wait_finished(prefix: str, count: int, timeout: float = 120) -> None:
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


# Measurements -------------------------------------------------------------------------


@dataclass
class Lateness:
    """Seconds late, one per timer."""

    values: list[float]

    @property
    def early(self) -> int:
        return sum(value < 0 for value in self.values)


@dataclass
class Results:
    """What one configuration (a number of clusters) measured."""

    clusters: int
    sleeps: Lateness
    retries: Lateness
    resolved: list[float]
    resumed: list[float]
    steps_per_second: float
    loaded_sleeps: Lateness


def seconds(delta: timedelta) -> float:
    return delta.total_seconds()


def start_sleeps(prefix: str, count: int) -> None:
    """Start ``count`` sleeps spread evenly from 0.5 s to 3 s."""
    from django_workerflow import start

    for index in range(count):
        duration = 0.5 + 2.5 * index / max(count - 1, 1)
        start("bench-sleep", key=f"{prefix}{index}", input={"seconds": duration})


def sleep_lateness(prefix: str) -> Lateness:
    from django_workerflow.models import Step

    rows = Step.objects.filter(instance__key__startswith=prefix, step_id="nap").values_list(
        "resolved_at", "wake_at"
    )
    return Lateness([seconds(resolved - wake) for resolved, wake in rows])


def retry_lateness(prefix: str) -> Lateness:
    from django_workerflow.models import StepEvent, StepEventType

    events = StepEvent.objects.filter(instance__key__startswith=prefix)
    due = dict(
        events.filter(type=StepEventType.ATTEMPT_FAILED, attempt_number=1).values_list(
            "instance_id", "next_attempt_at"
        )
    )
    started = dict(
        events.filter(type=StepEventType.ATTEMPT_STARTED, attempt_number=2).values_list(
            "instance_id", "recorded_at"
        )
    )
    return Lateness([seconds(started[pk] - due[pk]) for pk in due])


def measure_timers(run: str, args: argparse.Namespace, workdir: Path) -> tuple[Lateness, Lateness]:
    """Start the sleeps and the 250 ms retries, interleaved, at ``args.rate`` instances per
    second; return their lateness."""
    from django_workerflow import start

    markers = workdir / f"{run}-retry-markers"
    markers.mkdir()
    arrivals = sorted(
        [(index / args.sleeps, "sleep", index) for index in range(args.sleeps)]
        + [((index + 0.5) / args.retries, "retry", index) for index in range(args.retries)]
    )
    began = time.monotonic()
    for position, (_, kind, index) in enumerate(arrivals):
        time.sleep(max(began + position / args.rate - time.monotonic(), 0))
        if kind == "sleep":
            duration = 0.5 + 2.5 * index / max(args.sleeps - 1, 1)
            start("bench-sleep", key=f"{run}-sleep-{index}", input={"seconds": duration})
        else:
            start("bench-retry", key=f"{run}-retry-{index}", input={"dir": str(markers)})
    wait_finished(f"{run}-sleep-", args.sleeps)
    wait_finished(f"{run}-retry-", args.retries)
    return sleep_lateness(f"{run}-sleep-"), retry_lateness(f"{run}-retry-")


def measure_events(run: str, args: argparse.Namespace) -> tuple[list[float], list[float]]:
    """Send "go" to waiting instances one at a time; return the send-to-resolved and the
    send-to-next-step latencies."""
    from django_workerflow import send_event, start
    from django_workerflow.clock import now
    from django_workerflow.models import Step, StepEvent, StepEventType, WorkflowInstance

    keys = [f"{run}-event-{index}" for index in range(args.events)]
    for key in keys:
        start("bench-event", key=key)
    wait_until(
        lambda: (
            WorkflowInstance.objects.filter(
                key__in=keys, lease_token__isnull=True, steps__step_id="go"
            ).count()
            == len(keys)
        ),
        timeout=60,
        what="every instance to wait for its event",
    )
    sent: dict[str, datetime] = {}
    for key in keys:
        sent[key] = now()
        send_event(key, "go")
        time.sleep(0.1)
    wait_finished(f"{run}-event-", args.events)
    resolved = dict(
        Step.objects.filter(instance__key__in=keys, step_id="go").values_list(
            "instance__key", "resolved_at"
        )
    )
    resumed = dict(
        StepEvent.objects.filter(
            instance__key__in=keys, step__step_id="after", type=StepEventType.ATTEMPT_STARTED
        ).values_list("instance__key", "recorded_at")
    )
    return (
        [seconds(resolved[key] - sent[key]) for key in keys],
        [seconds(resumed[key] - sent[key]) for key in keys],
    )


def release_burst(prefix: str, args: argparse.Namespace) -> datetime:
    """Start the throughput instances in one transaction; return when it committed."""
    from django.db import transaction

    from django_workerflow import start
    from django_workerflow.clock import now

    with transaction.atomic():
        for index in range(args.instances):
            start("bench-steps", key=f"{prefix}{index}", input={"steps": args.steps})
    return now()


def measure_throughput(run: str, args: argparse.Namespace) -> float:
    """Release a burst of instances of trivial steps; return run steps per second."""
    from django.db.models import Max

    from django_workerflow.models import WorkflowInstance

    prefix = f"{run}-steps-"
    released = release_burst(prefix, args)
    wait_finished(prefix, args.instances, timeout=600)
    last = WorkflowInstance.objects.filter(key__startswith=prefix).aggregate(
        last=Max("finished_at")
    )["last"]
    return args.instances * args.steps / seconds(last - released)


def measure_loaded_sleeps(run: str, args: argparse.Namespace) -> Lateness:
    """Start the sleeps right after another burst is released; return their lateness."""
    release_burst(f"{run}-load-", args)
    start_sleeps(f"{run}-loaded-sleep-", args.sleeps)
    wait_finished(f"{run}-load-", args.instances, timeout=600)
    wait_finished(f"{run}-loaded-sleep-", args.sleeps)
    return sleep_lateness(f"{run}-loaded-sleep-")


def warm_up(run: str) -> None:
    """Wait until a cluster has executed work (the first tick imports everything)."""
    from django_workerflow import start

    start("bench-steps", key=f"{run}-warmup-{uuid.uuid4()}", input={"steps": 1})
    wait_finished(f"{run}-warmup-", 1, timeout=30)


def measure(clusters: int, args: argparse.Namespace, workdir: Path) -> Results:
    run = f"c{clusters}"
    warm_up(run)
    print(f"Measuring with {clusters} cluster(s)...", flush=True)
    sleeps, retries = measure_timers(run, args, workdir)
    resolved, resumed = measure_events(run, args)
    return Results(
        clusters=clusters,
        sleeps=sleeps,
        retries=retries,
        resolved=resolved,
        resumed=resumed,
        steps_per_second=measure_throughput(run, args),
        loaded_sleeps=measure_loaded_sleeps(run, args),
    )


# Report -------------------------------------------------------------------------------


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[max(math.ceil(fraction * len(ordered)) - 1, 0)]


def ms(value: float) -> str:
    return f"{value * 1000:.1f} ms"


Row = tuple[str, list[str]]


def lateness_rows(title: str, results: list[Lateness]) -> list[Row]:
    return [
        (title, []),
        ("  min", [ms(min(r.values)) for r in results]),
        ("  median", [ms(statistics.median(r.values)) for r in results]),
        ("  p99", [ms(percentile(r.values, 0.99)) for r in results]),
        ("  max", [ms(max(r.values)) for r in results]),
        ("  fired early (must be 0)", [str(r.early) for r in results]),
    ]


def latency_rows(title: str, results: list[list[float]]) -> list[Row]:
    return [
        (title, []),
        ("  median", [ms(statistics.median(r)) for r in results]),
        ("  p99", [ms(percentile(r, 0.99)) for r in results]),
    ]


def print_report(described: str, args: argparse.Namespace, results: list[Results]) -> None:
    from django.conf import settings

    q = settings.Q_CLUSTER
    print()
    print(f"django-workerflow timers benchmark on {described}")
    print(
        f"Q_CLUSTER: workers={q.get('workers')} poll={q.get('poll')} timeout={q.get('timeout')} "
        f"retry={q.get('retry')} max_attempts={q.get('max_attempts')} orm={q.get('orm')!r}; "
        f"CONN_MAX_AGE={settings.DATABASES['default']['CONN_MAX_AGE']:g}"
    )
    burst = f"{args.instances} instances x {args.steps} run steps"
    rows: list[Row] = [
        *lateness_rows(
            f"sleep lateness, {args.sleeps} sleeps of 0.5-3 s ({args.rate:g} starts/s)",
            [r.sleeps for r in results],
        ),
        *lateness_rows(
            f"retry lateness, {args.retries} retries after 250 ms ({args.rate:g} starts/s)",
            [r.retries for r in results],
        ),
        *latency_rows(
            f"event -> wait step resolved, {args.events} events", [r.resolved for r in results]
        ),
        *latency_rows(
            f"event -> next step started, {args.events} events", [r.resumed for r in results]
        ),
        (f"throughput, {burst}", [f"{r.steps_per_second:.0f} steps/s" for r in results]),
        *lateness_rows(
            f"sleep lateness during a burst of {burst}", [r.loaded_sleeps for r in results]
        ),
    ]
    headers = [f"{r.clusters} cluster{'s' if r.clusters > 1 else ''}" for r in results]
    width = max(len(label) for label, _ in rows)
    print()
    print(f"{'':<{width}}" + "".join(f"{header:>14}" for header in headers))
    for label, cells in rows:
        print(f"{label:<{width}}" + "".join(f"{cell:>14}" for cell in cells))
    print()
    print("p99 is nearest-rank: with fewer than 100 samples it is the maximum.")


# Main ---------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="workerflow-bench-"))
    described = prepare_database(args, workdir)
    setup_django()
    print(f"Cluster logs: {workdir}", flush=True)
    results = []
    with ExitStack() as clusters:
        for count in range(1, args.clusters + 1):
            clusters.enter_context(running_cluster(workdir / f"qcluster-{count}.log"))
            results.append(measure(count, args, workdir))
    print_report(described, args, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
