"""Scenario ``peer``: the same workloads written for DBOS Transact, in this process, on the same
database server (its own PostgreSQL database, or its own SQLite file in WAL mode with
``synchronous=NORMAL`` like ours).

Our sequential run and DBOS's alternate, so that both see the same machine load; the ratio
is of their medians. DBOS is installed only in the benchmark's venv (``.[bench]``).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from django.db import connection

from .common import Sizes, drop_postgres_database
from .inline import drive, start_inline


def dbos_version() -> str | None:
    try:
        from importlib.metadata import version

        import dbos  # noqa: F401 - is it installed?
    except ImportError:
        return None
    return version("dbos")


def sqlite_engine(url: str) -> Any:
    """DBOS's own SQLite engine settings, plus the WAL mode our database runs in."""
    import sqlalchemy
    from sqlalchemy import event

    engine = sqlalchemy.create_engine(url)

    @event.listens_for(engine, "connect")
    def tune(dbapi_connection: Any, record: Any) -> None:
        dbapi_connection.isolation_level = "IMMEDIATE"
        dbapi_connection.execute("PRAGMA busy_timeout=30000")
        dbapi_connection.execute("PRAGMA foreign_keys=ON")
        dbapi_connection.execute("PRAGMA journal_mode=WAL")
        dbapi_connection.execute("PRAGMA synchronous=NORMAL")

    return engine


def launch(workdir: Path, pg_name: str) -> dict[str, Any]:
    from dbos import DBOS

    config: dict[str, Any] = {"name": "workerflow-bench", "log_level": "WARNING"}
    if connection.vendor == "postgresql":
        name = f"{pg_name}_dbos"
        drop_postgres_database(name)
        config["system_database_url"] = f"postgresql://postgres@127.0.0.1:5432/{name}"
        described = f"PostgreSQL database {name!r}"
    else:
        path = workdir / "dbos.sqlite3"
        config["system_database_url"] = f"sqlite:///{path}"
        config["system_database_engine"] = sqlite_engine(config["system_database_url"])
        described = f"SQLite {path.name} (WAL, synchronous=NORMAL)"
    from . import dbos_workload  # noqa: F401 - registers the workflows before launch

    DBOS(config=config)
    DBOS.launch()
    return {"database": described}


def ours_sequential(steps: int) -> float:
    pk = start_inline("bench-steps", steps)
    began = time.perf_counter()
    drive(pk)
    return steps / (time.perf_counter() - began)


def dbos_sequential(steps: int) -> float:
    from .dbos_workload import sequential

    began = time.perf_counter()
    sequential(steps)
    return steps / (time.perf_counter() - began)


def dbos_fleet(instances: int, steps: int) -> dict[str, Any]:
    from dbos import DBOS

    from .dbos_workload import sequential

    began = time.perf_counter()
    handles = [DBOS.start_workflow(sequential, steps) for _ in range(instances)]
    for handle in handles:
        handle.get_result()
    elapsed = time.perf_counter() - began
    return {
        "steps": instances * steps,
        "seconds": elapsed,
        "steps_per_second": instances * steps / elapsed,
    }


def dbos_starts(count: int) -> dict[str, Any]:
    """DBOS's start_workflow in a loop (a workflow of no step): each call's time, and the
    rate of the loop; the workflows' results are awaited afterwards."""
    from dbos import DBOS

    from .dbos_workload import sequential

    timings = []
    handles = []
    began = time.perf_counter()
    for _ in range(count):
        started = time.perf_counter()
        handles.append(DBOS.start_workflow(sequential, 0))
        timings.append(time.perf_counter() - started)
    elapsed = time.perf_counter() - began
    for handle in handles:
        handle.get_result()
    return {
        "starts": count,
        "median": statistics.median(timings),
        "starts_per_second": count / elapsed,
    }


def peer(sizes: Sizes, workdir: Path, pg_name: str, progress: Any) -> dict[str, Any]:
    version = dbos_version()
    if version is None:
        return {"skipped": "dbos not installed"}
    from dbos import DBOS

    progress(f"DBOS {version}: launching")
    results: dict[str, Any] = {"version": version, **launch(workdir, pg_name)}
    try:
        dbos_sequential(min(sizes.peer_steps, 100))  # warm up
        ours: list[float] = []
        theirs: list[float] = []
        progress(f"sequential, {sizes.peer_steps} steps, ours and DBOS alternating")
        for _ in range(sizes.peer_repeats):
            ours.append(ours_sequential(sizes.peer_steps))
            theirs.append(dbos_sequential(sizes.peer_steps))
        results["sequential"] = {
            "steps": sizes.peer_steps,
            "runs": sizes.peer_repeats,
            "ours_steps_per_second": statistics.median(ours),
            "dbos_steps_per_second": statistics.median(theirs),
            "ratio": statistics.median(ours) / statistics.median(theirs),
        }
        progress(f"DBOS fleet, {sizes.fleet_instances} x {sizes.fleet_steps} steps")
        results["fleet"] = dbos_fleet(sizes.fleet_instances, sizes.fleet_steps)
        progress(f"DBOS start_workflow, {sizes.starts_timed} starts")
        results["starts"] = dbos_starts(sizes.starts_timed)
    finally:
        DBOS.destroy(destroy_registry=True)
    return results
