"""Run the scenarios on one database, in this process, and write the results as JSON.

    python -m bench.run --db postgres --out results.json [--smoke] [--only sequential,...]

``python -m bench`` runs this once per database (Django's settings hold one database per
process) and prints the combined table. The database is created afresh: PostgreSQL database
``--pg-name`` (dropped first), or ``bench.sqlite3`` in ``--workdir``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .common import FULL, SMOKE, Sizes, load_average, recreate_postgres_database

SCENARIOS = (
    "statements",
    "sequential",
    "replay",
    "profile",
    "starts",
    "clusters",
    "peer",
    "scale",
    "composition",
    "check_replay",
    "recovery",
    "queue",
    "admin",
    "wal",
    "tasks",
    "metrics",
    "history",
    "timeouts",
    "attributes",
    "verdicts",
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    parser.add_argument("--db", choices=["sqlite", "postgres"], required=True)
    parser.add_argument("--out", type=Path, required=True, help="JSON results file")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (seconds)")
    parser.add_argument("--pg-name", default="workerflow_bench")
    parser.add_argument("--workdir", type=Path, default=None, help="SQLite files, cluster logs")
    parser.add_argument("--artifacts", type=Path, default=Path("artifacts"))
    parser.add_argument("--only", default=",".join(SCENARIOS), help="comma-separated scenarios")
    return parser.parse_args(argv)


def prepare_database(args: argparse.Namespace, workdir: Path) -> str:
    """Point this process (and the clusters it starts) at a fresh database."""
    os.environ.update(
        DJANGO_SETTINGS_MODULE="bench.settings", WORKERFLOW_DB=args.db, PYTHONUNBUFFERED="1"
    )
    if args.db == "postgres":
        recreate_postgres_database(args.pg_name)
        os.environ["WORKERFLOW_PG_NAME"] = args.pg_name
        return f"PostgreSQL database {args.pg_name!r}"
    path = workdir / "bench.sqlite3"
    for stale in workdir.glob("bench.sqlite3*"):
        stale.unlink()
    os.environ["WORKERFLOW_SQLITE_PATH"] = str(path)
    return f"SQLite {path} (WAL, synchronous=NORMAL, IMMEDIATE)"


def setup_django() -> None:
    import django
    from django.core.management import call_command

    django.setup()
    # django-q2 logs every task this process enqueues (its clusters keep their INFO log).
    logging.getLogger("django-q").setLevel(logging.WARNING)
    call_command("migrate", verbosity=0, interactive=False)


def environment(described: str) -> dict[str, Any]:
    import platform
    import sqlite3
    from importlib.metadata import version

    import django
    from django.db import connection

    from .common import postgres_version

    facts = {
        "database": described,
        "vendor": connection.vendor,
        "python": platform.python_version(),
        "django": django.get_version(),
        "cpus": os.cpu_count(),
    }
    if connection.vendor == "postgresql":
        facts["server"] = f"PostgreSQL {postgres_version()}, psycopg {version('psycopg')}"
    else:
        facts["server"] = f"SQLite {sqlite3.sqlite_version}"
    return facts


def scenario_runners(
    args: argparse.Namespace, sizes: Sizes, workdir: Path, progress: Callable[[str], None]
) -> dict[str, Callable[[], Any]]:
    from . import (
        admin_scale,
        attributes_scale,
        cluster,
        composition,
        deploy,
        flow,
        history,
        inline,
        metrics_scale,
        peer,
        replay_verdicts,
        scale,
        starts,
        step_timeouts,
        tasks,
        wal,
    )

    vendor = "postgresql" if args.db == "postgres" else "sqlite"
    profile_file = args.artifacts / f"profile-{vendor}{'-smoke' if args.smoke else ''}.txt"
    return {
        "statements": lambda: inline.statements(sizes),
        "sequential": lambda: inline.sequential(sizes),
        "replay": lambda: inline.replay(sizes),
        "profile": lambda: inline.profile(sizes, profile_file),
        "starts": lambda: starts.starts(sizes),
        "clusters": lambda: cluster.with_clusters(sizes, workdir, progress),
        "peer": lambda: peer.peer(sizes, workdir, args.pg_name, progress),
        "scale": lambda: scale.scale(sizes, progress),
        "composition": lambda: composition.composition(sizes, workdir, progress),
        "check_replay": lambda: deploy.check_replay(sizes, progress),
        "recovery": lambda: deploy.kill_to_retry(sizes, workdir, progress),
        "queue": lambda: flow.queue_drain(sizes),
        "admin": lambda: admin_scale.admin_scale(sizes, progress),
        "wal": lambda: wal.wal(sizes),
        "tasks": lambda: tasks.tasks_scenario(sizes, workdir, progress),
        "metrics": lambda: metrics_scale.metrics_scale(sizes, progress),
        "history": lambda: history.history(sizes),
        "timeouts": lambda: step_timeouts.step_timeouts(sizes),
        "attributes": lambda: attributes_scale.attributes_scale(sizes, progress),
        "verdicts": lambda: replay_verdicts.replay_verdicts(sizes, progress),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = SMOKE if args.smoke else FULL
    workdir = args.workdir or Path.cwd()
    workdir.mkdir(parents=True, exist_ok=True)
    args.artifacts.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()

    def progress(message: str) -> None:
        elapsed = time.monotonic() - began
        print(f"[{args.db} {elapsed:5.0f} s] {message}", file=sys.stderr, flush=True)

    progress("creating the database")
    described = prepare_database(args, workdir)
    setup_django()
    results: dict[str, Any] = {"environment": environment(described), "load": {}}
    results["load"]["before"] = load_average()
    wanted = [name for name in args.only.split(",") if name]
    failed = False
    for name, run in scenario_runners(args, sizes, workdir, progress).items():
        if name not in wanted:
            continue
        progress(name)
        try:
            results[name] = run()
        except Exception as exc:
            failed = True
            traceback.print_exc()
            results[name] = {"error": f"{type(exc).__name__}: {exc}"}
    results["load"]["after"] = load_average()
    results["seconds"] = time.monotonic() - began
    args.out.write_text(json.dumps(results, indent=2, default=str))
    progress("done")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
