"""Fault injection with real ``qcluster`` processes: what the tests here share.

The ``qcluster`` fixture (and the hook that attaches the clusters' logs to a failing test's
report) come from ``tests/cluster/conftest.py``. The workflows live in
``tests/clusterapp/workflows.py`` (``fault-steps``, ``fault-poison``, ``fault-fails-later``,
``fault-long-step``): their callbacks append ``start``/``end`` lines to one trace file, which
:class:`Trace` reads to know which worker runs which step right now, and to count executions
and effects afterwards.

The database restart tests restart the PostgreSQL server that serves the test database (found
by its port with ``pg_lsclusters``). Every other database on that server is cut off for a few
seconds: on a shared machine, point ``WORKERFLOW_PG_PORT`` at a private server.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.contrib.auth.models import Group
from django.db import connection

from django_workerflow.engine.execution import INTERRUPTED_ERROR_NAME
from django_workerflow.models import (
    Step,
    StepEventType,
    StepState,
    StepType,
    WorkflowInstance,
    step_events_of,
)
from django_workerflow.runtime import sweeping
from tests.cluster.conftest import (  # noqa: F401 - the fixture and the hook, by name
    Cluster,
    ClusterRunner,
    pytest_runtest_makereport,
    qcluster,
    wait_until,
)

ON_POSTGRES = connection.vendor == "postgresql"

#: The lease of the tests' clusters: a crashed tick is taken over this soon.
LEASE_SECONDS = "3"

StepKey = tuple[str, str]  # (instance key, step id)


# Processes ----------------------------------------------------------------------------


def child_pids(pid: int) -> set[int]:
    """The live children of ``pid`` (empty once it is gone)."""
    children: set[int] = set()
    for path in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            children.update(int(child) for child in path.read_text().split())
        except FileNotFoundError:
            continue
    return children


def worker_pids(cluster: Cluster) -> set[int]:
    """The cluster's live worker processes.

    django-q2's main process forks a sentinel, which forks the workers, a monitor and a
    pusher; the workers are the grandchildren that announced "ready for work".
    """
    announced = {int(pid) for pid in re.findall(r"ready for work at (\d+)", cluster.log())}
    grandchildren = set().union(*(child_pids(pid) for pid in child_pids(cluster.pid)))
    return announced & grandchildren


def respawned_workers(cluster: Cluster) -> int:
    """How many dead workers django-q2's guard replaced."""
    return cluster.log().count("reincarnated worker")


# The callbacks' trace -----------------------------------------------------------------


@dataclass(slots=True)
class Callback:
    """One execution of a step callback, from its trace lines."""

    key: str
    step_id: str
    pid: int
    started: float
    seconds: float
    ended: float | None = None

    @property
    def step(self) -> StepKey:
        return (self.key, self.step_id)


class Trace:
    """Reads the shared trace file as it grows.

    ``read()`` takes in the lines written since the last call; ``running`` maps a pid to the
    callback it executes now (a process runs one callback at a time).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.callbacks: list[Callback] = []
        self.running: dict[int, Callback] = {}
        self._offset = 0

    def read(self) -> Trace:
        if not self.path.exists():
            return self
        with self.path.open("rb") as file:
            file.seek(self._offset)
            data = file.read()
        complete = data[: data.rfind(b"\n") + 1]
        self._offset += len(complete)
        for line in complete.decode().splitlines():
            self._take(line.split())
        return self

    def _take(self, fields: list[str]) -> None:
        kind, key, step_id, pid = fields[0], fields[1], fields[2], int(fields[3])
        if kind == "start":
            callback = Callback(key, step_id, pid, float(fields[4]), float(fields[5]))
            self.callbacks.append(callback)
            self.running[pid] = callback
            return
        callback = self.running.pop(pid)
        assert callback.step == (key, step_id), f"pid {pid} ended {key} {step_id}: {callback}"
        callback.ended = float(fields[4])

    def attempt_of(self, callback: Callback) -> int:
        """The attempt number ``callback`` executed: its step's n-th execution is its n-th
        attempt (check_steps_recorded_once proves one execution per attempt started)."""
        return [c for c in self.callbacks if c.step == callback.step].index(callback) + 1

    def executions(self) -> Counter[StepKey]:
        """Callback starts per step."""
        return Counter(callback.step for callback in self.read().callbacks)

    def effects(self) -> Counter[StepKey]:
        """Callbacks that reached their end line (a plain step's effect), per step."""
        return Counter(callback.step for callback in self.read().callbacks if callback.ended)


def atomic_effects(prefix: str) -> Counter[StepKey]:
    """Committed ``Group`` rows of atomic steps per step, for instance keys with ``prefix``."""
    names = Group.objects.filter(name__startswith=prefix).values_list("name", flat=True)
    return Counter(tuple(name.split("/")[:2]) for name in names)  # type: ignore[misc]


# Driving the instances to the end -----------------------------------------------------


def drive(
    instances: Iterable[int],
    *,
    timeout: float,
    sweep_every: float = 0.5,
    on_poll: Callable[[], None] | None = None,
    interval: float = 0.05,
) -> int:
    """Wait until every instance has finished, calling ``sweeping.sweep()`` every
    ``sweep_every`` seconds (the clusters' own sweeper runs about once a minute) and
    ``on_poll`` between polls; return how many bells the sweeps rang."""
    pks = set(instances)
    deadline = time.monotonic() + timeout
    next_sweep = time.monotonic()
    rung = 0
    while WorkflowInstance.objects.filter(pk__in=pks).finished().count() < len(pks):
        if time.monotonic() >= deadline:
            pytest.fail(f"Timed out after {timeout} s: {progress(pks)}")
        if time.monotonic() >= next_sweep:
            rung += sweeping.sweep()
            next_sweep = time.monotonic() + sweep_every
        if on_poll is not None:
            on_poll()
        time.sleep(interval)
    return rung


def progress(pks: Iterable[int]) -> str:
    """Instance statuses and running steps, for a failure message."""
    instances = WorkflowInstance.objects.filter(pk__in=set(pks))
    statuses = Counter(instances.values_list("status", flat=True))
    running = list(
        Step.objects.filter(instance__in=instances, state=StepState.RUNNING).values_list(
            "instance__key", "step_id", "attempt_count"
        )
    )
    leased = instances.filter(lease_token__isnull=False).count()
    return f"statuses {dict(statuses)}, leased {leased}, running steps {running[:20]}"


# Attempt histories --------------------------------------------------------------------


@dataclass(slots=True)
class Attempts:
    """The attempt events of one run step, checked for consistency."""

    started: int
    succeeded: int
    interrupted: int
    failed: int
    unfinished: int


History = list[tuple[str, int, str, str]]


def attempt_histories(definition_name: str) -> dict[StepKey, History]:
    """``(type, attempt number, error name, error message)`` of every attempt event, per
    run step."""
    histories: dict[StepKey, History] = defaultdict(list)
    instances = WorkflowInstance.objects.filter(definition_name=definition_name).order_by("id")
    for instance in instances:
        # Stored and derived: a run step's first start and its success are read from its row.
        steps = list(
            Step.objects.filter(instance=instance, type=StepType.RUN).order_by("created_at", "id")
        )
        for event in step_events_of(instance, steps):
            histories[(instance.key, event.step.step_id)].append(
                (event.type, event.attempt_number, event.error_name, event.error_message)
            )
    return dict(histories)


def check_attempts(step: StepKey, history: History) -> Attempts:
    """Fail unless the history is whole: attempts 1..n each started once, each with exactly
    one outcome, only the last one successful; only the last may still lack its outcome."""
    by_attempt: dict[int, list[str]] = defaultdict(list)
    errors: dict[int, str] = {}
    for event_type, attempt, error_name, _ in history:
        by_attempt[attempt].append(event_type)
        if event_type == StepEventType.ATTEMPT_FAILED:
            errors[attempt] = error_name
    count = len(by_attempt)
    assert sorted(by_attempt) == list(range(1, count + 1)), f"{step}: attempts {history}"
    outcomes = {StepEventType.ATTEMPT_SUCCEEDED, StepEventType.ATTEMPT_FAILED}
    for attempt, types in sorted(by_attempt.items()):
        assert types.count(StepEventType.ATTEMPT_STARTED) == 1, f"{step}: {history}"
        finished = [event_type for event_type in types if event_type in outcomes]
        assert len(finished) + 1 == len(types), f"{step}: unexpected events {history}"
        if attempt < count:
            assert finished == [StepEventType.ATTEMPT_FAILED], f"{step}: {history}"
        else:
            assert len(finished) <= 1, f"{step}: attempt {attempt} has two outcomes {history}"
    last = by_attempt[count]
    return Attempts(
        started=count,
        succeeded=last.count(StepEventType.ATTEMPT_SUCCEEDED),
        interrupted=sum(1 for name in errors.values() if name == INTERRUPTED_ERROR_NAME),
        failed=len(errors),
        unfinished=0 if len(last) == 2 else 1,
    )


#: What a failed database connection raises (the restart test sees these in atomic steps).
DATABASE_ERRORS = frozenset({"OperationalError", "InterfaceError"})


def check_steps_recorded_once(
    definition_name: str,
    trace: Trace,
    *,
    atomic_prefix: str,
    database_errors_in_atomic_steps: bool = False,
) -> dict[str, int]:
    """The exactly-once checks shared by the fault tests; return their figures.

    Every run step of every instance of ``definition_name`` (``fault-steps``: the odd steps
    are atomic): whole attempt history with exactly one success, every failed attempt an
    interrupted one, one callback execution per attempt started (so re-executions =
    interrupted attempts); an atomic step's database effect committed exactly once, a plain
    step's effect at least once.

    ``database_errors_in_atomic_steps`` also accepts attempts of atomic steps that failed
    with a database error: the callback's own writes hit the broken connection, and the
    transaction rolled back with the attempt recorded as failed (it was retried).
    """
    steps = list(
        Step.objects.filter(
            instance__definition_name=definition_name, type=StepType.RUN
        ).values_list("instance__key", "step_id", "state")
    )
    assert Counter(state for *_, state in steps) == {StepState.SUCCEEDED: len(steps)}
    histories = attempt_histories(definition_name)
    assert set(histories) == {(key, step_id) for key, step_id, _ in steps}
    attempts = {step: check_attempts(step, history) for step, history in histories.items()}
    assert {step: a.succeeded for step, a in attempts.items() if a.succeeded != 1} == {}
    atomic_steps = {step for step in histories if int(step[1].rsplit("-", 1)[1]) % 2 == 1}
    rolled_back = Counter(
        step
        for step in atomic_steps
        for event_type, _, error_name, _ in histories[step]
        if event_type == StepEventType.ATTEMPT_FAILED and error_name in DATABASE_ERRORS
    )
    if not database_errors_in_atomic_steps:
        rolled_back.clear()
    unexplained = {
        step: histories[step]
        for step, a in attempts.items()
        if a.failed != a.interrupted + rolled_back[step]
    }
    assert unexplained == {}, "failed attempts neither interrupted nor rolled back"
    executions = trace.executions()
    started = Counter({step: a.started for step, a in attempts.items()})
    # A callback that ran without an attempt recorded for it would be a silent re-execution;
    # an attempt without its callback, an execution lost from the trace.
    assert executions == started, (
        f"callback executions differ from attempts started: "
        f"{dict((executions - started) + (started - executions))}"
    )
    effects = trace.effects()
    atomic = atomic_effects(atomic_prefix)
    assert {step: atomic[step] for step in atomic_steps if atomic[step] != 1} == {}
    assert set(atomic) == atomic_steps
    plain_steps = set(histories) - atomic_steps
    assert {step for step in plain_steps if effects[step] < 1} == set()
    interrupted = sum(a.interrupted for a in attempts.values())
    figures = {
        "run steps": len(steps),
        "interrupted attempts": interrupted,
        "re-executions": sum(executions.values()) - len(executions),
        "plain effects repeated": sum(effects[step] - 1 for step in plain_steps),
        "atomic rows": sum(atomic.values()),
        "recovered instances": len({key for (key, _), a in attempts.items() if a.interrupted}),
    }
    if database_errors_in_atomic_steps:
        figures["atomic attempts rolled back"] = sum(rolled_back.values())
    return figures


def assert_no_step_running(definition_name: str) -> None:
    running = list(
        Step.objects.filter(
            instance__definition_name=definition_name, state=StepState.RUNNING
        ).values_list("instance__key", "step_id", "attempt_count")
    )
    assert running == []


def finished_statuses(pks: Iterable[int]) -> Counter[str]:
    return Counter(
        WorkflowInstance.objects.filter(pk__in=set(pks)).values_list("status", flat=True)
    )


# PostgreSQL server control ------------------------------------------------------------

PG_CTLCLUSTER = shutil.which("pg_ctlcluster")
PG_LSCLUSTERS = shutil.which("pg_lsclusters")


def pg_port() -> int:
    return int(connection.settings_dict.get("PORT") or 5432)


def pg_cluster() -> tuple[str, str] | None:
    """``(version, name)`` of the local cluster (Debian's pg_ctlcluster) that serves the
    tests' database port, or None."""
    if not (ON_POSTGRES and PG_CTLCLUSTER and PG_LSCLUSTERS):
        return None
    listing = subprocess.run(
        [PG_LSCLUSTERS, "--no-header"], capture_output=True, text=True, check=False
    ).stdout
    for line in listing.splitlines():
        version, name, port, *_ = line.split()
        if port == str(pg_port()):
            return version, name
    return None


def pg_ready() -> bool:
    """True once the server accepts connections (a real connection, not only the socket)."""
    probe = subprocess.run(
        ["pg_isready", "-q", "-h", "127.0.0.1", "-p", str(pg_port())], check=False
    )
    return probe.returncode == 0


def pg_ctl(action: str) -> None:
    version, name = pg_cluster()  # type: ignore[misc]  # the tests skip without one
    subprocess.run(
        [PG_CTLCLUSTER, "--skip-systemctl-redirect", version, name, action],
        check=True,
        timeout=120,
        capture_output=True,
    )


def restart_postgresql() -> float:
    """Restart the PostgreSQL server; return the seconds until it accepted connections again.

    The test's own connection is closed first (the restart would break it); Django opens a
    new one on the next query.
    """
    connection.close()
    began = time.monotonic()
    pg_ctl("restart")
    wait_until(pg_ready, timeout=60, interval=0.1, what="PostgreSQL to accept connections")
    return time.monotonic() - began


@contextmanager
def postgresql_kept_up() -> Iterator[None]:
    """Whatever happens inside, PostgreSQL is running again afterwards."""
    try:
        yield
    finally:
        if not pg_ready():
            connection.close()
            pg_ctl("start")
            wait_until(pg_ready, timeout=60, interval=0.1, what="PostgreSQL to start again")
