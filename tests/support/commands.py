"""The ``workerflow`` command: called in this process for its output, or ``manage.py`` run as
a real process for the exit codes the commands end with."""

from __future__ import annotations

import os
import subprocess
import sys
from io import StringIO
from pathlib import Path

from django.core.management import call_command

ROOT = Path(__file__).resolve().parents[2]


def manage(*args: str, db_path: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "WORKERFLOW_DB": "sqlite"}
    if db_path is not None:
        env["WORKERFLOW_SQLITE_PATH"] = str(db_path)
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def workerflow_output(*args: str) -> str:
    """What ``manage.py workerflow ARGS`` prints, called in this process."""
    out = StringIO()
    call_command("workerflow", *args, stdout=out)
    return out.getvalue()
