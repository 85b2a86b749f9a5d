"""Real ``manage.py qcluster`` subprocesses against the test database.

The ``qcluster`` fixture starts clusters on demand, waits until they really execute work,
and stops each with SIGTERM to its main PID (SIGTERM to the whole process group can hang
django-q2); only a cluster that does not stop in time gets its process group killed. Each
cluster writes its output to a log file under the test's tmp path; the logs are attached to
the report of a failing test.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from django.db import connection

from django_workerflow import start
from django_workerflow.models import WorkflowInstance, WorkflowStatus

REPO = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT = 30.0
STOP_TIMEOUT = 30.0
LOG_TAIL_LINES = 300

_runners = pytest.StashKey["ClusterRunner"]()


def wait_until(
    predicate: Callable[[], Any], *, timeout: float, interval: float = 0.05, what: str
) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"Timed out after {timeout} s waiting for {what}.")
        time.sleep(interval)


class Cluster:
    """One ``manage.py qcluster`` process, in its own process group."""

    def __init__(self, name: str, log_path: Path, env: dict[str, str]) -> None:
        self.name = name
        self.log_path = log_path
        self._log: IO[bytes] = log_path.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, str(REPO / "manage.py"), "qcluster"],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def is_running(self) -> bool:
        """True once django-q2 reports the cluster running (its workers are spawned)."""
        return " running." in self.log()

    def stop(self) -> None:
        """SIGTERM the main process and wait; kill the whole group only if it hangs."""
        try:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGTERM)
                try:
                    self.process.wait(STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    self.kill_group()
                    self.process.wait()
                    raise RuntimeError(
                        f"{self.name} did not stop within {STOP_TIMEOUT} s of SIGTERM; "
                        "its process group was killed."
                    ) from None
            self._reap_stragglers()
        finally:
            self._log.close()

    def _reap_stragglers(self) -> None:
        """Kill group members left behind by the main process (a hang, not a clean stop)."""
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if not self._group_alive():
                return
            time.sleep(0.1)
        self.kill_group()

    def _group_alive(self) -> bool:
        try:
            os.killpg(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def kill_group(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)


class ClusterRunner:
    """Starts clusters for one test and stops them all when it ends."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.clusters: list[Cluster] = []
        self.probe_pks: list[int] = []

    def start(self, count: int = 1, **env: str) -> list[Cluster]:
        """Start ``count`` clusters (extra environment variables in ``env``) and return once
        all report running and one of them has executed a probe workflow."""
        started = [
            Cluster(
                f"qcluster-{len(self.clusters) + index}",
                self.log_dir / f"qcluster-{len(self.clusters) + index}.log",
                cluster_environment(env),
            )
            for index in range(count)
        ]
        self.clusters += started
        for cluster in started:
            wait_until(
                lambda cluster=cluster: self._check_alive(cluster) and cluster.is_running(),
                timeout=STARTUP_TIMEOUT,
                interval=0.1,
                what=f"{cluster.name} to report running",
            )
        self.probe()
        return started

    def probe(self) -> int:
        """Start a one-step workflow and wait until a cluster has completed it."""
        instance = start("cluster-probe", key=f"probe-{uuid.uuid4()}")
        wait_until(
            lambda: WorkflowInstance.objects.filter(
                pk=instance.pk, status=WorkflowStatus.COMPLETED
            ).exists(),
            timeout=STARTUP_TIMEOUT,
            what="a cluster to execute the probe workflow",
        )
        self.probe_pks.append(instance.pk)
        return instance.pk

    def log(self) -> str:
        """Every cluster's output so far."""
        return "\n".join(cluster.log() for cluster in self.clusters)

    def stop_all(self) -> None:
        errors = []
        for cluster in self.clusters:
            try:
                cluster.stop()
            except RuntimeError as exc:
                errors.append(str(exc))
        if errors:
            pytest.fail("\n".join(errors))

    @staticmethod
    def _check_alive(cluster: Cluster) -> bool:
        code = cluster.process.poll()
        if code is not None:
            pytest.fail(f"{cluster.name} exited with code {code} during startup.")
        return True


def cluster_environment(extra: dict[str, str]) -> dict[str, str]:
    """The environment that points a qcluster subprocess at this test's database."""
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="tests.settings",
        PYTHONUNBUFFERED="1",
    )
    name = str(connection.settings_dict["NAME"])
    if connection.vendor == "postgresql":
        env.update(WORKERFLOW_DB="postgres", WORKERFLOW_PG_NAME=name)
    else:
        env.update(WORKERFLOW_DB="sqlite", WORKERFLOW_SQLITE_PATH=name)
    env.update(extra)
    return env


@pytest.fixture
def qcluster(
    request: pytest.FixtureRequest, transactional_db: None, tmp_path: Path
) -> Iterator[ClusterRunner]:
    """A :class:`ClusterRunner`: ``qcluster.start(count, **env)`` starts real clusters."""
    log_dir = tmp_path / "qcluster-logs"
    log_dir.mkdir()
    runner = ClusterRunner(log_dir)
    request.node.stash[_runners] = runner
    try:
        yield runner
    finally:
        runner.stop_all()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Attach the tail of every cluster's log to the report of a failing test."""
    report = yield
    runner = item.stash.get(_runners, None)
    if report.failed and runner is not None:
        for cluster in runner.clusters:
            lines = cluster.log().splitlines()[-LOG_TAIL_LINES:]
            report.sections.append(
                (f"{cluster.name} log (last {len(lines)} lines)", "\n".join(lines))
            )
    return report
