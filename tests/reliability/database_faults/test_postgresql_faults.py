"""The database goes away under two real clusters: nothing lost or doubled, no process dies.

Each run starts a PostgreSQL server of its own (:mod:`.server`: initdb into a temporary
directory, a free port; never the developer's server) and runs :mod:`.scenario` against it
in a process of its own: three faults in a row (every backend terminated, a fast restart,
the server stopped 20 to 25 s) under four-step workflows with atomic steps, sleeps and
waits, with a web process sending events and starting workflows meanwhile. Two seeds.

About three minutes a seed: not in the default run. ``make test-faults`` runs it
(``WORKERFLOW_DATABASE_FAULTS=1``); it prints each run's figures (seconds to the first step
after the server is back, to every in-flight instance moving, ...), which it does not assert
on: they depend on the machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.reliability.database_faults.server import DATABASE, PrivateServer, binaries

REPO = Path(__file__).resolve().parents[3]
BINARIES = binaries()

pytestmark = [
    pytest.mark.reliability,
    pytest.mark.cluster,
    pytest.mark.slow,
    pytest.mark.skipif(BINARIES is None, reason="needs PostgreSQL's initdb and pg_ctl"),
    pytest.mark.skipif(
        os.environ.get("WORKERFLOW_DATABASE_FAULTS") != "1",
        reason="minutes long: run with make test-faults (WORKERFLOW_DATABASE_FAULTS=1)",
    ),
]


@pytest.fixture
def server() -> Iterator[PrivateServer]:
    assert BINARIES is not None
    created = PrivateServer.create(BINARIES)
    try:
        created.start()
        created.create_database()
        yield created
    finally:
        created.destroy()


def run_scenario(server: PrivateServer, seed: int, out: Path) -> dict[str, Any]:
    """Run the scenario in a process of its own; return its figures."""
    assert DATABASE == "workerflow_faults"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.reliability.database_faults.scenario",
            f"--port={server.port}",
            f"--root={server.root}",
            f"--bin={server.bin_dir}",
            f"--seed={seed}",
            f"--out={out}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("FIGURES ")]
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    assert lines, done.stdout[-3000:]
    return json.loads(lines[-1].removeprefix("FIGURES "))


@pytest.mark.parametrize("seed", [38, 83])
def test_database_faults__nothing_lost_or_doubled_and_no_process_dies(
    server: PrivateServer, seed: int, tmp_path: Path
) -> None:
    figures = run_scenario(server, seed, tmp_path)
    print(f"\n[database faults] seed {seed}: {json.dumps(figures, sort_keys=True)}")

    assert figures["completed"] == figures["instances"]
    assert figures["events_delivered_once"] == figures["instances"]
    assert figures["events_doubled"] == 0
    assert figures["processes_died"] == 0
    assert figures["pusher_failures"] == 0
    for fault in ("terminate", "restart", "stop"):
        assert figures[fault]["in_flight_not_moved_in_60s"] == 0, fault
    web = figures["web"]
    assert web["start"] == "OperationalError"
    assert web["health_exit_status"] == 3
    assert web["health_lines"] == 1
    assert web["health_first_line"].startswith("CommandError: DATABASE UNAVAILABLE")
