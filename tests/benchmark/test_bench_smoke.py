"""The benchmark suite's smoke mode: every scenario runs, with tiny sizes, on the
database under test, and the table is printed. Nothing about speed is asserted.

The bench uses databases of its own: a SQLite file in a temp folder, or a PostgreSQL
database named after this process (dropped afterwards), never the pytest test database.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Slow: the fleet and latency scenarios start real qcluster processes.
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SECTIONS = (
    "1. Sequential",
    "2. Replay",
    "3. Statements",
    "4. Fleet",
    "5. Latency",
    "6. Scale",
    "7. Peer",
    "8. Composition",
    "9. Deploy safety",
    "10. Queue",
    "14. django.tasks",
    "15. Metrics scrape",
    "Targets: a run step",
    "Targets: beside DBOS and django-tasks-db, side by side",
    "Targets: a step without a timeout",
    "Targets: at scale",
)
SCENARIOS = (
    "statements",
    "sequential",
    "replay",
    "profile",
    "clusters",
    "peer",
    "scale",
    "composition",
    "check_replay",
    "recovery",
    "queue",
    "tasks",
    "metrics",
    "timeouts",
    "attributes",
)


def run_smoke(tmp_path: Path) -> tuple[subprocess.CompletedProcess, str]:
    db = os.environ.get("WORKERFLOW_DB", "sqlite")
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    command = [
        sys.executable,
        "-m",
        "bench",
        "--smoke",
        "--db",
        db,
        "--pg-name",
        f"workerflow_bench_smoke_{os.getpid()}",
        "--drop-db",
        "--json",
        str(tmp_path / "bench.json"),
        "--artifacts",
        str(tmp_path),
    ]
    completed = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    return completed, "postgresql" if db == "postgres" else "sqlite"


def test_bench_smoke__runs_every_scenario_and_prints_one_table(tmp_path):
    completed, vendor = run_smoke(tmp_path)
    output = completed.stdout
    assert completed.returncode == 0, output + completed.stderr[-5000:]
    assert "django-workerflow benchmark" in output
    for section in SECTIONS:
        assert section in output, section
    assert "ERROR" not in output, output
    if importlib.util.find_spec("dbos") is None:
        assert "skipped: dbos not installed" in output
    saved = json.loads((tmp_path / "bench.json").read_text())
    measured = saved["results"][vendor]
    assert all(scenario in measured for scenario in SCENARIOS), sorted(measured)
    assert saved["table"] in output
