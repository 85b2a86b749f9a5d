"""Scenarios driven inline, in this process (bells suppressed): 1 sequential, 2 replay,
3 statement count, and the profile of the sequential hot path.

The raw commit rate is the database's limit for this process: one-row INSERTs in autocommit
(each its own transaction) through the same Django connection the engine uses, measured
right before and right after each workflow run so that both see the same machine load.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from django.db import connection

from django_workerflow import start
from django_workerflow.models import WorkflowInstance
from django_workerflow.runtime.tick import tick
from django_workerflow.values.clock import now as clock_now
from django_workerflow.workers import bells

from .common import REPO, Sizes, Stopwatch

PROBE_TABLE = "bench_commit_probe"
TRANSACTION_CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE")


# Driving a workflow inline ------------------------------------------------------------


def start_inline(definition: str, steps: int) -> int:
    """Start an instance without ringing a bell; return its pk."""
    with bells.suppressed():
        instance = start(definition, key=f"{definition}-{uuid.uuid4()}", input={"steps": steps})
    return instance.pk


def drive(instance_pk: int) -> str:
    """Tick until the instance completes, fails or suspends; return that outcome.

    A tick that spends its budget yields (and the next one replays): that cost is counted.
    """
    with bells.suppressed():
        while True:
            outcome = tick(instance_pk).outcome
            if outcome in ("completed", "failed", "suspended"):
                return outcome
            if outcome != "yielded":
                raise RuntimeError(f"Unexpected tick outcome {outcome!r}.")


def make_due(instance_pk: int) -> None:
    """Bring a sleeping instance's alarm to now: its next tick replays it."""
    WorkflowInstance.objects.filter(pk=instance_pk).update(alarm_at=clock_now())


# The raw commit rate ------------------------------------------------------------------


def create_probe_table() -> None:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                f"CREATE TABLE IF NOT EXISTS {PROBE_TABLE} "
                "(id bigserial PRIMARY KEY, value integer NOT NULL)"
            )
        else:
            cursor.execute(
                f"CREATE TABLE IF NOT EXISTS {PROBE_TABLE} "
                "(id integer PRIMARY KEY AUTOINCREMENT, value integer NOT NULL)"
            )


def commit_rate(seconds: float) -> float:
    """One-row INSERTs per second in autocommit, each its own transaction."""
    sql = f"INSERT INTO {PROBE_TABLE} (value) VALUES (%s)"
    count = 0
    with connection.cursor() as cursor:
        began = time.perf_counter()
        deadline = began + seconds
        while True:
            cursor.execute(sql, [count])
            count += 1
            if count % 20 == 0 and time.perf_counter() >= deadline:
                break
        elapsed = time.perf_counter() - began
    return count / elapsed


# 1. Sequential ------------------------------------------------------------------------


def sequential_run(steps: int, probe_seconds: float) -> dict[str, Any]:
    """One workflow of ``steps`` trivial run steps, between two commit-rate probes."""
    pk = start_inline("bench-steps", steps)
    before = commit_rate(probe_seconds)
    with Stopwatch() as watch:
        outcome = drive(pk)
    after = commit_rate(probe_seconds)
    if outcome != "completed":
        raise RuntimeError(f"The sequential workflow ended {outcome!r}.")
    raw = (before + after) / 2
    steps_per_second = steps / watch.seconds
    return {
        "steps": steps,
        "seconds": watch.seconds,
        "steps_per_second": steps_per_second,
        "ms_per_step": 1000 * watch.seconds / steps,
        "cpu_ms_per_step": 1000 * watch.cpu_seconds / steps,
        "raw_commits_per_second": raw,
        "ratio_to_raw": steps_per_second / raw,
    }


def sequential(sizes: Sizes) -> dict[str, Any]:
    """Scenario ``sequential``: the median of each size's runs. The runs of all sizes are
    interleaved and each size's runs spread over the whole scenario, so that a burst of load
    from elsewhere does not fall on one size only."""
    create_probe_table()
    drive(start_inline("bench-steps", 20))  # warm up: imports, prepared statements
    rounds = max(sizes.sequential.values())
    runs: dict[int, list[dict[str, Any]]] = {steps: [] for steps in sizes.sequential}
    for round_ in range(rounds):
        for steps, repeats in sizes.sequential.items():
            if round_ in spread(repeats, rounds):
                runs[steps].append(sequential_run(steps, sizes.commit_probe_seconds))
    return {str(steps): summarize_runs(measured) for steps, measured in runs.items()}


def spread(count: int, rounds: int) -> set[int]:
    """``count`` round numbers spread evenly over ``range(rounds)``."""
    if count <= 1:
        return {0}
    return {round(index * (rounds - 1) / (count - 1)) for index in range(count)}


def summarize_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    keys = [key for key in runs[0] if key != "steps"]
    summary = {key: statistics.median(run[key] for run in runs) for key in keys}
    return {"steps": runs[0]["steps"], "runs": len(runs), **summary}


# 2. Replay ----------------------------------------------------------------------------


def replay_tick_seconds(steps: int, repeats: int) -> float:
    """Median seconds of a tick that replays ``steps`` recorded run steps and sleeps again."""
    pk = start_inline("bench-steps-then-sleep", steps)
    if drive(pk) != "suspended":
        raise RuntimeError("The replay workflow did not reach its sleep.")
    timings = []
    for _ in range(repeats):
        make_due(pk)
        with Stopwatch() as watch:
            outcome = drive(pk)
        if outcome != "suspended":
            raise RuntimeError(f"The replaying tick ended {outcome!r}.")
        timings.append(watch.seconds)
    return statistics.median(timings)


def replay(sizes: Sizes) -> dict[str, Any]:
    """Scenario ``replay``: a tick replaying N recorded steps, minus a tick replaying none."""
    baseline = replay_tick_seconds(0, sizes.replay_repeats)
    full = replay_tick_seconds(sizes.replay_steps, sizes.replay_repeats)
    return {
        "steps": sizes.replay_steps,
        "tick_ms": 1000 * full,
        "empty_tick_ms": 1000 * baseline,
        "ms_per_step": 1000 * (full - baseline) / sizes.replay_steps,
    }


# 3. Statements ------------------------------------------------------------------------


class StatementCounter:
    """An ``execute_wrapper`` counting statements and transactions exactly.

    A transaction starts at an explicit BEGIN (SQLite), or at a statement sent while none
    is open: in autocommit it is a transaction of its own, otherwise psycopg opens one
    (PostgreSQL sends no BEGIN through Django's cursor).
    """

    def __init__(self) -> None:
        self.statements: list[str] = []
        self.transactions = 0

    def __call__(self, execute, sql, params, many, context):
        keyword = sql.lstrip().split(None, 1)[0].upper()
        if keyword == "BEGIN":
            self.transactions += 1
        elif keyword not in TRANSACTION_CONTROL:
            if self._opens_transaction(context["connection"]):
                self.transactions += 1
            self.statements.append(" ".join(sql.split()))
        return execute(sql, params, many, context)

    @staticmethod
    def _opens_transaction(conn: Any) -> bool:
        raw = conn.connection
        if conn.vendor == "postgresql":
            from psycopg import pq

            return raw.autocommit or raw.info.transaction_status == pq.TransactionStatus.IDLE
        return not raw.in_transaction


def count_tick(instance_pk: int) -> StatementCounter:
    counter = StatementCounter()
    with connection.execute_wrapper(counter):
        drive(instance_pk)
    return counter


def statements(sizes: Sizes) -> dict[str, Any]:
    """Scenario ``statements``: statements and transactions per run step and per replayed
    step, from the difference between two workflow sizes (the tick's fixed cost cancels
    out)."""
    small, large = sizes.statement_sizes
    drive(start_inline("bench-steps", 2))  # warm up: the connection prepares its statements
    pks = {steps: start_inline("bench-steps-then-sleep", steps) for steps in (small, large)}
    first = {steps: count_tick(pk) for steps, pk in pks.items()}
    for pk in pks.values():
        make_due(pk)
    replayed = {steps: count_tick(pk) for steps, pk in pks.items()}

    def per_step(counters: dict[int, StatementCounter]) -> dict[str, float]:
        span = large - small
        return {
            "statements": (len(counters[large].statements) - len(counters[small].statements))
            / span,
            "transactions": (counters[large].transactions - counters[small].transactions) / span,
        }

    # What a steady-state step sends: the statements the larger tick sent more, by kind.
    kinds: dict[str, float] = {}
    for steps, sign in ((large, 1), (small, -1)):
        for sql in first[steps].statements:
            kind = " ".join(sql.split()[:3])
            kinds[kind] = kinds.get(kind, 0) + sign / (large - small)
    return {
        "run_step": per_step(first),
        "replayed_step": per_step(replayed),
        "tick_fixed_statements": len(first[small].statements)
        - small * per_step(first)["statements"],
        "replay_tick_statements": len(replayed[small].statements),
        "run_step_sql": {kind: count for kind, count in kinds.items() if abs(count) >= 0.1},
    }


# Profile ------------------------------------------------------------------------------


def profile(sizes: Sizes, output: Path) -> dict[str, Any]:
    """The sequential hot path under pyinstrument: where the time of a step goes."""
    try:
        from pyinstrument import Profiler
    except ImportError:
        return {"skipped": "pyinstrument not installed"}
    pk = start_inline("bench-steps", sizes.profile_steps)
    profiler = Profiler(interval=0.0002)
    profiler.start()
    drive(pk)
    profiler.stop()
    session = profiler.last_session
    output.write_text(profiler.output_text(unicode=False, color=False, show_all=False))
    functions: dict[str, float] = {}
    layers: dict[str, float] = {}
    for frame, layer in _frames(session.root_frame(), "other (stdlib, bench)"):
        own = frame.total_self_time
        where = f"{frame.function} ({_short_path(frame.file_path)}:{frame.line_no})"
        functions[where] = functions.get(where, 0.0) + own
        layers[layer] = layers.get(layer, 0.0) + own
    duration = session.duration
    top = sorted(functions.items(), key=lambda item: item[1], reverse=True)[:12]
    return {
        "steps": sizes.profile_steps,
        "ms_per_step": 1000 * duration / sizes.profile_steps,
        "cpu_ms_per_step": 1000 * session.cpu_time / sizes.profile_steps,
        "file": str(output),
        "layers": {
            name: seconds / duration
            for name, seconds in sorted(layers.items(), key=lambda item: -item[1])
        },
        "top_self_time": [[where, seconds / duration] for where, seconds in top],
    }


def _frames(frame: Any, parent_layer: str) -> Iterator[tuple[Any, str]]:
    """Every real frame with the layer its own time is charged to."""
    layer = _layer(frame, parent_layer)
    if not frame.is_synthetic:
        yield frame, layer
    for child in frame.children:
        yield from _frames(child, layer)


def _short_path(path: str | None) -> str:
    if not path:
        return "?"
    if "site-packages/" in path:
        return path.split("site-packages/", 1)[1]
    if Path(path).is_relative_to(REPO):
        return str(Path(path).relative_to(REPO))
    if "lib/python3" in path:
        return path.split("lib/python3", 1)[1]
    return Path(path).name


DATABASE_CALLS = ("Connection.", "Cursor.", "SQLiteCursorWrapper.", "PGconn.")


def _layer(frame: Any, parent_layer: str) -> str:
    """Which layer a frame's own time belongs to; a built-in belongs to its caller's layer,
    unless it is the database driver's."""
    path = frame.file_path or ""
    if path.startswith("<"):
        if frame.function.startswith(DATABASE_CALLS):
            return "database (driver, round trips, commits)"
        return parent_layer
    if "psycopg" in path:
        return "database (driver, round trips, commits)"
    if "/django/db/" in path:
        return "Django db layer (cursor wrappers, transactions, ORM)"
    if "/django/" in path or "asgiref" in path:
        return "Django (other)"
    if "django_workerflow" in path:
        return "engine (django_workerflow)"
    return "other (stdlib, bench)"
