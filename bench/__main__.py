"""Run the benchmark suite on SQLite and PostgreSQL, print one table, save it as JSON.

    python -m bench                    # the full suite (make bench), a few minutes
    python -m bench --smoke            # tiny sizes: proves every scenario runs (seconds)
    python -m bench --db postgres --only sequential,statements

Each database runs in its own process (``python -m bench.run``): Django's settings hold one
database per process. The results go to ``artifacts/bench-<time>.json`` (``--json`` to choose).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from .common import REPO, drop_postgres_database, postgres_reachable
from .report import render
from .run import SCENARIOS

VENDORS = {"sqlite": "sqlite", "postgres": "postgresql"}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, seconds not minutes")
    parser.add_argument(
        "--db", default="sqlite,postgres", help="comma-separated: sqlite, postgres (default both)"
    )
    parser.add_argument(
        "--pg-name",
        default=None,
        help="PostgreSQL database (default workerflow_bench, or workerflow_bench_smoke); "
        "DBOS uses <name>_dbos",
    )
    parser.add_argument("--only", default=",".join(SCENARIOS), help="comma-separated scenarios")
    parser.add_argument("--json", type=Path, default=None, help="where to write the results")
    parser.add_argument(
        "--artifacts", type=Path, default=REPO / "artifacts", help="results and profiles"
    )
    parser.add_argument(
        "--drop-db", action="store_true", help="drop the PostgreSQL databases afterwards"
    )
    return parser.parse_args(argv)


def run_database(db: str, args: argparse.Namespace, artifacts: Path) -> dict | None:
    """Run ``bench.run`` on one database; its progress goes to stderr as it happens."""
    if db == "postgres":
        problem = postgres_reachable()
        if problem:
            print(f"PostgreSQL at 127.0.0.1:5432 is not reachable, skipped: {problem}")
            return None
    with tempfile.TemporaryDirectory(prefix=f"workerflow-bench-{db}-") as workdir:
        out = Path(workdir) / "results.json"
        command = [
            sys.executable,
            "-m",
            "bench.run",
            "--db",
            db,
            "--out",
            str(out),
            "--pg-name",
            args.pg_name,
            "--workdir",
            workdir,
            "--artifacts",
            str(artifacts),
            "--only",
            args.only,
        ]
        if args.smoke:
            command.append("--smoke")
        completed = subprocess.run(command, cwd=REPO, check=False)
        if not out.exists():
            print(f"bench.run on {db} wrote no results (exit {completed.returncode}).")
            return None
        results = json.loads(out.read_text())
        results["exit_code"] = completed.returncode
        return results


def attach_last_run(results: dict, artifacts: Path, *, smoke: bool) -> None:
    """Put the sequential figures of the newest earlier run of the same kind (smoke or
    full) beside this run's, under ``sequential_last_run``, for the table to compare."""
    suffix = "-smoke.json" if smoke else ".json"
    earlier = sorted(
        path
        for path in artifacts.glob("bench-*.json")
        if path.name.endswith(suffix) and (smoke or not path.name.endswith("-smoke.json"))
    )
    for path in reversed(earlier):
        try:
            last = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for vendor, measured in results.items():
            sequential = last.get("results", {}).get(vendor, {}).get("sequential")
            if isinstance(sequential, dict) and "error" not in sequential:
                measured["sequential_last_run"] = {"created": last["created"], **sequential}
        return


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.pg_name = args.pg_name or ("workerflow_bench_smoke" if args.smoke else "workerflow_bench")
    databases = [db for db in args.db.split(",") if db]
    unknown = set(databases) - set(VENDORS)
    if unknown:
        raise SystemExit(f"Unknown database(s): {', '.join(sorted(unknown))}.")
    artifacts = args.artifacts.resolve()
    artifacts.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    results = {}
    try:
        for db in databases:
            measured = run_database(db, args, artifacts)
            if measured is not None:
                results[VENDORS[db]] = measured
    finally:
        if args.drop_db and "postgresql" in results:
            drop_postgres_database(args.pg_name)
            drop_postgres_database(f"{args.pg_name}_dbos")
    attach_last_run(results, artifacts, smoke=args.smoke)
    table = render(results, smoke=args.smoke)
    print()
    print(table)
    target = args.json or artifacts / f"bench-{stamp}{'-smoke' if args.smoke else ''}.json"
    target.write_text(
        json.dumps(
            {"created": stamp, "smoke": args.smoke, "results": results, "table": table},
            indent=2,
        )
    )
    print(f"\nResults: {target}")
    failed = len(results) < len(databases) or any(r["exit_code"] for r in results.values())
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
