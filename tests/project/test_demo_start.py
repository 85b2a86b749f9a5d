"""How `make demo` starts: a fresh database each run unless DEMO_KEEP_DB=1, and the port it
serves on said aloud when DEMO_PORT (default 8000) is busy."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testproject import demo

ROOT = Path(__file__).resolve().parents[2]


def test_demo__deletes_the_last_runs_database_and_its_wal_files(tmp_path):
    database = tmp_path / "db.sqlite3"
    for name in ("db.sqlite3", "db.sqlite3-wal", "db.sqlite3-shm", "other.sqlite3"):
        (tmp_path / name).write_text("last run")

    said = demo.delete_sqlite_database(database)

    assert sorted(path.name for path in tmp_path.iterdir()) == ["other.sqlite3"]
    assert said == (
        "Starting from a fresh demo database (db.sqlite3); "
        "`make demo DEMO_KEEP_DB=1` keeps the last run's."
    )


def test_demo__takes_a_free_port_when_the_preferred_one_is_busy_and_says_which():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]

        port = demo.free_port(taken)

    assert port != taken
    assert demo.port_taken(taken, port) == (
        f"Port {taken} is busy: the demo serves on port {port} instead "
        "(choose another with `make demo DEMO_PORT=8080`)."
    )


def test_make_help__documents_demo_port_and_keep_db():
    help_text = subprocess.run(
        ["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    readme = (ROOT / "README.md").read_text()

    for text in (help_text, readme):
        assert "DEMO_PORT" in text
        assert "DEMO_KEEP_DB=1" in text


@pytest.mark.slow
def test_demo__run_twice_starts_afresh_and_names_the_port_it_took(tmp_path):
    """The demo itself, on a busy DEMO_PORT and a database left by a run before: it says
    which port it took, and its database holds none of the last run's rows."""
    database = tmp_path / "demo.sqlite3"
    database.write_text("not a database: the last run's, to be deleted")
    env = {
        **os.environ,
        "WORKERFLOW_SQLITE_PATH": str(database),
        "DJANGO_SETTINGS_MODULE": "testproject.settings",
    }
    env.pop("WORKERFLOW_DB", None)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        env["DEMO_PORT"] = str(busy.getsockname()[1])
        process = _spawn_demo(env)
        lines = []
        assert process.stdout is not None
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                line = process.stdout.readline()
                if not line:
                    break
                lines.append(line)
                if "django-workerflow demo is running" in line:
                    break
        finally:
            process.send_signal(signal.SIGINT)
            process.wait(timeout=30)
            process.stdout.close()
    output = "".join(lines)
    assert "Starting from a fresh demo database (demo.sqlite3)" in output
    said = re.search(rf"Port {env['DEMO_PORT']} is busy: the demo serves on port (\d+)", output)
    assert said, output
    assert "django-workerflow demo is running" in output


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads children from /proc")
def test_demo__a_second_signal_while_stopping_still_stops_the_worker_and_the_server(tmp_path):
    """`timeout make demo` signals make and the demo, and make signals the demo again: the
    demo stops its worker and web server all the same, leaving neither behind."""
    env = {
        **os.environ,
        "WORKERFLOW_SQLITE_PATH": str(tmp_path / "demo.sqlite3"),
        "DJANGO_SETTINGS_MODULE": "testproject.settings",
        "DEMO_PORT": "0",
    }
    env.pop("WORKERFLOW_DB", None)
    process = _spawn_demo(env)
    assert process.stdout is not None
    try:
        for line in process.stdout:
            if "django-workerflow demo is running" in line:
                break
        children = _children(process.pid)
        process.send_signal(signal.SIGTERM)
        time.sleep(0.05)  # inside its stop
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
        process.stdout.close()
    time.sleep(1)  # the orphans, if any, reaped by init
    assert len(children) == 2  # qcluster and runserver
    assert [pid for pid in children if Path(f"/proc/{pid}").exists()] == []


def _spawn_demo(env: dict[str, str]) -> subprocess.Popen[str]:
    """``python -m testproject.demo`` with ``env``, its output (both streams) read as text."""
    return subprocess.Popen(
        [sys.executable, "-m", "testproject.demo"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux's /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


@pytest.mark.slow
def test_make_test__says_how_many_browser_tests_it_skipped_and_how_to_include_them(tmp_path):
    """A pytest run where Playwright cannot be imported (a stand-in package that raises
    ModuleNotFoundError, as on a machine without it) ends with a banner naming the count
    and the fix."""
    shim = tmp_path / "playwright"
    shim.mkdir()
    (shim / "__init__.py").write_text("raise ModuleNotFoundError('No module named playwright')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "tests/browser"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )

    modules = len(list((ROOT / "tests" / "browser").glob("test_*.py")))
    assert f"= {modules} browser test modules skipped =" in done.stdout, done.stdout
    venv = Path(sys.prefix).name  # .venv under make test, CI's own venvs under .ci/run
    assert f"`bash .ci/install-browser {venv}`" in done.stdout
