"""The database faults, end to end: two real clusters, a web process, three faults.

Run by ``test_database_faults.py`` (and by hand, to measure) against a server of its own::

    python -m tests.reliability.database_faults.scenario --port PORT --seed SEED --out DIR

with a private server (:mod:`.server`) already listening on ``PORT`` and its database
created. The scenario migrates, starts two ``qcluster`` processes with the README's settings
(``CONN_MAX_AGE = 60``, ``CONN_HEALTH_CHECKS``, the recommended ``Q_CLUSTER``), and for each
fault (every backend terminated; a fast restart; the server stopped 20 to 25 s) starts a
batch of four-step workflows (atomic odd steps, a sleep, a wait for an event) and hits the
server once callbacks are in flight. This process plays the web server meanwhile: it sends
each waiting instance its event (with an idempotency key where the code has it, retried
after an error), and during the outage also calls ``start()`` and ``manage.py workerflow
health``. It prints one ``FIGURES {json}`` line; nothing in it asserts on time.

The server is the one :meth:`.server.PrivateServer.create` made in ``--root`` (``pg_ctl``
runs as its owner).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.reliability.database_faults.server import PrivateServer

#: The clusters' settings beyond the README's: a short lease and sweep, so that recovery
#: through the lease is seconds, not minutes.
LEASE_SECONDS = 3.0
SWEEP_SECONDS = 2.0
#: The engine's log line of a tick that takes up an instance whose tick broke.
TAKEOVER = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) WARNING django_workerflow\.runtime\.tick: "
    r"taking over an expired lease key=(\S+)",
    re.MULTILINE,
)
INSTANCES_PER_FAULT = 12
STEPS = 4
STEP_SECONDS = (0.3, 0.9)
#: How soon after the server is back an instance whose tick the fault broke moves again at
#: the latest: its callback ends (at most a step's time), its lease runs out (a lease after
#: its last renewal), the sweeper's next link (at most a sweep later) rings it, and a claim
#: and a tick start (a second).
RECOVERY_BOUND = STEP_SECONDS[1] + LEASE_SECONDS + SWEEP_SECONDS + 1.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--root", required=True, help="the private server's directory")
    parser.add_argument("--bin", required=True, help="the PostgreSQL binaries' directory")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--out", required=True, help="a directory for the logs and the trace")
    args = parser.parse_args()
    os.environ.update(
        DJANGO_SETTINGS_MODULE="tests.settings",
        WORKERFLOW_DB="postgres",
        WORKERFLOW_PG_PORT=str(args.port),
        WORKERFLOW_PG_NAME="workerflow_faults",
        WORKERFLOW_LEASE_SECONDS=str(LEASE_SECONDS),
        WORKERFLOW_SWEEP_SECONDS=str(SWEEP_SECONDS),
    )
    import django

    django.setup()
    figures = Scenario(args).run()
    print("FIGURES " + json.dumps(figures, sort_keys=True), flush=True)


class Scenario:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out = Path(args.out)
        self.rng = random.Random(args.seed)
        self.server = PrivateServer(Path(args.bin), Path(args.root), args.port)
        self.trace_path = self.out / "trace"
        self.pks: list[int] = []
        self.web = Web()
        self.clusters: list[Any] = []

    def run(self) -> dict[str, Any]:
        from django.core.management import call_command

        from tests.cluster.conftest import Cluster, cluster_environment

        call_command("migrate", verbosity=0)
        env = cluster_environment({})
        clusters = self.clusters = [
            Cluster(f"qcluster-{index}", self.out / f"qcluster-{index}.log", env)
            for index in range(2)
        ]
        figures: dict[str, Any] = {"seed": self.args.seed, "recovery_bound_s": RECOVERY_BOUND}
        try:
            self._wait(lambda: all(c.is_running() for c in clusters), 60, "clusters running")
            self.web.start()
            faults = [
                ("terminate", self._terminate),
                ("restart", self.server.restart),
                ("stop", self._stop_for_a_while),
            ]
            for name, fault in faults:
                figures[name] = self._fault(name, fault)
            try:
                figures["completed_within_s"] = self._drain()
            except TimeoutError as exc:
                figures["completed_within_s"] = str(exc)
            try:
                figures.update(self._check())
            except AssertionError as exc:  # the figures say what was lost or doubled
                figures["check_failed"] = str(exc)[:2000]
                figures.update(self._counts())
        finally:
            for cluster in clusters:
                try:
                    cluster.stop()
                except RuntimeError as exc:
                    figures["stop_error"] = str(exc)
            self.web.stop()
        log = "\n".join(cluster.log() for cluster in clusters)
        figures["processes_died"] = log.count("reincarnated")
        figures["pusher_failures"] = log.count("Failed to pull task from broker")
        figures["log_lines_database_unavailable"] = log.count("database unavailable:")
        figures["log_lines_database_back"] = log.count("database available again:")
        figures["tracebacks_in_logs"] = log.count("Traceback (most recent call last)")
        figures["web"] = self.web.figures()
        return figures

    # Faults -----------------------------------------------------------------------------

    def _fault(self, name: str, fault: Any) -> dict[str, Any]:
        from tests.reliability.faults.conftest import Trace

        batch = self._start_batch(name)
        trace = Trace(self.trace_path)
        self._wait(lambda: len(trace.read().running) >= 2, 60, f"callbacks in flight ({name})")
        in_flight = {callback.key for callback in trace.running.values()}
        fault_at = time.time()
        downtime = fault()
        back_at = time.time()
        moved: dict[str, float] = {}
        first_step = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (first_step is None or len(moved) < len(in_flight)):
            trace.read()
            for callback in trace.callbacks:
                if callback.started <= back_at:
                    continue
                if first_step is None or callback.started - back_at < first_step:
                    first_step = callback.started - back_at
                if callback.key in in_flight and callback.key not in moved:
                    moved[callback.key] = callback.started - back_at
            self._moved_by_finishing(in_flight, moved, back_at)
            time.sleep(0.1)
        taken_up = dict(moved)
        for key, at in self._takeovers(back_at).items():
            if key in in_flight:
                taken_up[key] = min(taken_up.get(key, at), at)
        return {
            "instances": len(batch),
            "callbacks_in_flight": len(in_flight),
            "downtime_s": round(downtime, 2),
            "fault_to_back_s": round(back_at - fault_at, 2),
            "first_step_after_back_s": None if first_step is None else round(first_step, 2),
            # A tick took the instance up again (its expired lease taken over, or it ran on).
            "in_flight_taken_up_max_s": round(max(taken_up.values()), 2) if taken_up else None,
            # Its next callback ran (after the retry's backoff, for an interrupted attempt).
            "in_flight_next_callback_max_s": round(max(moved.values()), 2) if moved else None,
            "in_flight_not_moved_in_60s": len(in_flight) - len(moved),
        }

    def _takeovers(self, since: float) -> dict[str, float]:
        """Seconds after ``since`` of the first "taking over an expired lease" per key."""
        found: dict[str, float] = {}
        for cluster in self.clusters:
            for stamp, key in TAKEOVER.findall(cluster.log()):
                at = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp() - since
                if at > 0 and at < found.get(key, at + 1):
                    found[key] = at
        return found

    def _moved_by_finishing(self, keys: set[str], moved: dict[str, float], since: float) -> None:
        """An in-flight instance whose interrupted step was its last moves by finishing."""
        from django.db import Error, close_old_connections

        from django_workerflow.models import WorkflowInstance

        close_old_connections()
        try:
            finished = WorkflowInstance.objects.filter(key__in=keys - set(moved)).finished()
            for key, at in finished.values_list("key", "finished_at"):
                if at is not None:
                    moved[key] = at.timestamp() - since
        except Error:
            pass

    def _terminate(self) -> float:
        self.server.terminate_backends()
        return 0.0

    def _stop_for_a_while(self) -> float:
        self.server.stop()
        began = time.monotonic()
        pause = self.rng.uniform(20, 25)
        time.sleep(1.0)
        self.web.during_outage()
        time.sleep(max(0.0, pause - (time.monotonic() - began)))
        self.server.start()
        return time.monotonic() - began

    def _start_batch(self, name: str) -> list[int]:
        from django.db import close_old_connections

        from django_workerflow import start

        close_old_connections()  # as a request starts: a connection the fault killed goes
        pks = [
            start(
                "fault-steps",
                key=f"{name}-{index}",
                input={
                    "trace": str(self.trace_path),
                    "steps": STEPS,
                    "seconds": STEP_SECONDS,
                    "nap": self.rng.choice([0.2, 0.5]),
                    "wait": "go",
                    "max_attempts": 5,
                },
            ).pk
            for index in range(INSTANCES_PER_FAULT)
        ]
        self.pks += pks
        return pks

    # The end ----------------------------------------------------------------------------

    def _drain(self) -> float:
        from django_workerflow.models import WorkflowInstance

        began = time.monotonic()
        finished = WorkflowInstance.objects.filter(pk__in=self.pks).finished()
        self._wait(lambda: finished.count() == len(self.pks), 180, "every instance to finish")
        return round(time.monotonic() - began, 1)

    def _check(self) -> dict[str, Any]:
        from django.db import close_old_connections

        from tests.reliability.faults.conftest import Trace, check_steps_recorded_once

        close_old_connections()
        exactly_once = check_steps_recorded_once(
            "fault-steps",
            Trace(self.trace_path),
            atomic_prefix="",
            database_errors_in_atomic_steps=True,
        )
        return {**self._counts(), "exactly_once": exactly_once}

    def _counts(self) -> dict[str, Any]:
        from collections import Counter

        from django_workerflow.models import InboundEvent, WorkflowInstance

        statuses = Counter(
            WorkflowInstance.objects.filter(pk__in=self.pks).values_list("status", flat=True)
        )
        events = Counter(
            InboundEvent.objects.filter(instance__in=self.pks).values_list("instance", flat=True)
        )
        return {
            "instances": len(self.pks),
            "completed": statuses.get("completed", 0),
            "statuses": dict(statuses),
            "events_delivered_once": sum(1 for count in events.values() if count == 1),
            "events_doubled": sum(1 for count in events.values() if count > 1),
        }

    @staticmethod
    def _wait(predicate: Any, timeout: float, what: str) -> None:
        from django.db import Error, close_old_connections

        deadline = time.monotonic() + timeout
        while True:
            close_old_connections()
            try:
                if predicate():
                    return
            except Error:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
            time.sleep(0.1)


class Web(threading.Thread):
    """The web process's requests: every instance waiting for ``go`` is sent it, once per
    instance with an idempotency key where ``send_event`` takes one; an error is retried."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self._halt = threading.Event()
        self.sent = 0
        self.errors: dict[str, int] = {}
        self.fail_seconds: list[float] = []
        self.outage: dict[str, Any] = {}

    def run(self) -> None:
        from django.db import Error, close_old_connections, connection

        from django_workerflow import send_event
        from django_workerflow.models import Step, StepState, StepType

        keyed = "idempotency_key" in inspect.signature(send_event).parameters
        while not self._halt.is_set():
            close_old_connections()  # as each request starts
            try:
                waiting = list(
                    Step.objects.filter(
                        type=StepType.WAIT, state=StepState.WAITING, event_name="go"
                    ).values_list("instance__key", flat=True)
                )
                for key in waiting:
                    began = time.monotonic()
                    try:
                        if keyed:
                            send_event(key, "go", key, idempotency_key=f"go-{key}")
                        else:
                            send_event(key, "go", key)
                        self.sent += 1
                    except Error as error:
                        self._failed(error, began)
                        connection.close()
            except Error as error:
                self._failed(error, time.monotonic())
                connection.close()
            self._halt.wait(0.2)
        connection.close()

    def _failed(self, error: Exception, began: float) -> None:
        name = type(error).__name__
        self.errors[name] = self.errors.get(name, 0) + 1
        self.fail_seconds.append(time.monotonic() - began)

    def during_outage(self) -> None:
        """What a web request and a supervisor see while the server is down."""
        from django.db import Error, connection

        from django_workerflow import start

        began = time.monotonic()
        try:
            start("fault-steps", key="web-during-outage", input={})
            self.outage["start"] = "no error"
        except Error as error:
            self.outage["start"] = type(error).__name__
        self.outage["start_failed_after_s"] = round(time.monotonic() - began, 3)
        connection.close()
        probe = subprocess.run(
            [sys.executable, "manage.py", "workerflow", "health"],
            env=dict(os.environ),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        output = (probe.stdout + probe.stderr).strip().splitlines()
        self.outage["health_exit_status"] = probe.returncode
        self.outage["health_lines"] = len(output)
        self.outage["health_first_line"] = re.sub(r"\s+", " ", output[0])[:160] if output else ""

    def stop(self) -> None:
        self._halt.set()
        if self.is_alive():
            self.join(10)

    def figures(self) -> dict[str, Any]:
        return {
            "events_sent": self.sent,
            "errors": self.errors,
            "slowest_failure_s": round(max(self.fail_seconds), 3) if self.fail_seconds else None,
            **self.outage,
        }


if __name__ == "__main__":
    main()
