"""Workflows run by real qcluster subprocesses in tests/cluster.

Callbacks leave their traces in files under the directory given in the input, written with
O_APPEND so lines from several processes never interleave within a line: the tests read
them to count callback executions and to check which process ran what, and when.
"""

from __future__ import annotations

import os
import random
import statistics
import threading
import time
import uuid
from pathlib import Path

from django_workerflow import WorkflowDefinition


def append_line(path: str | Path, line: str) -> int:
    """Append ``line`` to ``path`` in one write; return how many lines the file now has."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)
    return Path(path).read_text().count("\n")


class Probe(WorkflowDefinition):
    """One trivial step: proves that a cluster executes work."""

    name = "cluster-probe"
    version = "1"

    def execute(self) -> int:
        return self.run("ping", os.getpid)


class Journey(WorkflowDefinition):
    """A retry (the first attempt fails), a one-second sleep and a wait for an event."""

    name = "cluster-journey"
    version = "1"

    def execute(self) -> dict:
        trace = Path(self.input["dir"]) / f"{self.key}.flaky"
        tries = self.run("flaky", lambda: self.flaky(trace))
        self.sleep("nap", 1)
        approval = self.wait("approval", "approved", timeout=60)
        return self.run("finish", lambda: {"tries": tries, "approval": approval})

    @staticmethod
    def flaky(trace: Path) -> int:
        tries = append_line(trace, str(os.getpid()))
        if tries == 1:
            raise RuntimeError("The first attempt fails on purpose.")
        return tries


class Steps(WorkflowDefinition):
    """Run steps around a short sleep; each callback logs its start and end with its pid."""

    name = "cluster-steps"
    version = "1"

    def execute(self) -> int:
        trace = Path(self.input["dir"]) / f"{self.key}.trace"
        total = 0
        for index in range(self.input["steps"]):
            if index == self.input["steps"] // 2:
                self.sleep("breather", 0.2)
            step_id = f"step-{index}"
            total += self.run(step_id, lambda step_id=step_id: self.callback(trace, step_id))
        return total

    @staticmethod
    def callback(trace: Path, step_id: str) -> int:
        append_line(trace, f"start {step_id} {os.getpid()} {time.time():.6f}")
        # Hold the step open a little so that overlapping executions would show.
        time.sleep(random.uniform(0.001, 0.005))
        append_line(trace, f"end {step_id} {os.getpid()} {time.time():.6f}")
        return 1


class Crash(WorkflowDefinition):
    """The first attempt of 'slow' records its pid and sleeps until the test kills it."""

    name = "cluster-crash"
    version = "1"

    def execute(self) -> str:
        attempts = Path(self.input["dir"]) / f"{self.key}.attempts"
        pid = self.run("slow", lambda: self.slow(attempts))
        return self.run("after", lambda: f"recovered after pid {pid}")

    @staticmethod
    def slow(attempts: Path) -> int:
        if append_line(attempts, str(os.getpid())) == 1:
            time.sleep(30)
        return os.getpid()


def hold_the_gil(seconds: float) -> float:
    """Hold the GIL in one C call for about ``seconds``; return the longest time a ticking
    thread was kept from running meanwhile (the proof that no other thread ran).

    ``sum(range(n))`` is one C loop that never returns to the interpreter, so no other
    thread of the process (the lease renewal thread included) runs until it returns; a long
    ``re`` match behaves the same. ``time.sleep`` and big ``hashlib``/``zlib`` calls release
    the GIL and would prove nothing.
    """
    # The median of five: one run slowed (or sped up) by a busy machine does not set the hold.
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        sum(range(1_000_000))
        runs.append(time.perf_counter() - start)
    rate = 1_000_000 / max(statistics.median(runs), 1e-6)
    gaps = [0.0]
    stop = False

    def tick() -> None:
        last = time.perf_counter()
        while not stop:
            time.sleep(0.01)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    time.sleep(0.05)
    sum(range(int(rate * seconds)))
    stop = True
    ticker.join()
    return max(gaps)


class GilHold(WorkflowDefinition):
    """One step whose first attempt sleeps ``delay`` seconds (the GIL released), then holds
    the GIL in a C call for about ``seconds``. The trace's end line carries when the hold
    began and ended, and how long a ticking thread was blocked."""

    name = "cluster-gil-hold"
    version = "1"

    def execute(self) -> float:
        return self.run("hold", self.hold, max_attempts=3)

    def hold(self) -> float:
        trace, marker = self.input["trace"], Path(self.input["marker"])
        seconds = 0.0 if marker.exists() else self.input["seconds"]
        marker.touch()
        started = time.time()
        trace_callback(trace, "start", self.key, "hold", os.getpid(), f"{started:.6f}")
        if seconds:
            time.sleep(self.input.get("delay", 0.0))
        began = time.time()
        blocked = hold_the_gil(seconds) if seconds else 0.0
        ended = time.time()
        trace_callback(
            trace,
            "end",
            self.key,
            "hold",
            os.getpid(),
            f"{began - started:.3f}",
            f"{ended - started:.3f}",
            f"{blocked:.3f}",
        )
        return blocked


class Nap(WorkflowDefinition):
    """A two-second sleep, then one step."""

    name = "cluster-nap"
    version = "1"

    def execute(self) -> str:
        self.sleep("nap", 2)
        return self.run("after", lambda: "awake")


class Overdue(WorkflowDefinition):
    """Sleeps an hour (``how`` "sleep") or runs a step that sleeps an hour in Python
    (``how`` "step"): longer than the instance timeout its start gives."""

    name = "cluster-overdue"
    version = "1"

    def execute(self) -> str:
        if self.input["how"] == "sleep":
            self.sleep("nap", 3600)
        else:
            self.run("hang", lambda: time.sleep(3600), max_attempts=1)
        return "done"


class Import(WorkflowDefinition):
    """Ten batches of ``pause`` seconds each, reporting progress before each and at the end."""

    name = "cluster-progress"
    version = "1"

    def execute(self) -> int:
        batches = 10
        for number in range(batches):
            self.set_progress(number, batches, message=f"batch {number + 1}")
            self.run(f"batch-{number}", lambda: time.sleep(self.input["pause"]))
        self.set_progress(batches, batches, message="done")
        return batches


class Touch(WorkflowDefinition):
    """Create the file named in the input: a trace that the workflow ran at all."""

    name = "cluster-touch"
    version = "1"

    def execute(self) -> None:
        self.run("touch", lambda: Path(self.input["path"]).touch())


class Hooked(WorkflowDefinition):
    """Completes at once; its on_finish logs "<pid> <outcome id>" and, the first time,
    sleeps until the test kills the worker."""

    name = "cluster-hooked"
    version = "1"

    def execute(self) -> str:
        return "done"

    def on_finish(self, outcome: object) -> None:
        attempts = Path(self.input["dir"]) / f"{self.key}.hook"
        if append_line(attempts, f"{os.getpid()} {outcome.id}") == 1:  # type: ignore[attr-defined]
            time.sleep(30)


# Debounce (tests/cluster/test_debounce_cluster.py) ---------------------------------------


class Debounced(WorkflowDefinition):
    """Debounced by its definition: records "<pid> <n> <time>" once it runs."""

    name = "cluster-debounced"
    version = "1"
    debounce = 1
    max_debounce = 10

    def execute(self) -> int:
        trace = Path(self.input["dir"]) / f"{self.key}.runs"
        self.run(
            "record",
            lambda: append_line(trace, f"{os.getpid()} {self.input['n']} {time.time():.6f}"),
        )
        return int(self.input["n"])


# Fault injection (tests/reliability/faults) ---------------------------------------------


def trace_callback(path: str | Path, *fields: object) -> None:
    """Append one line of space-separated ``fields`` to ``path`` in one O_APPEND write."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (" ".join(str(field) for field in fields) + "\n").encode())
    finally:
        os.close(fd)


class FaultSteps(WorkflowDefinition):
    """Run steps that take a while, alternately plain and atomic, with an optional sleep.

    Input: ``trace`` (a file shared by all instances), ``steps``, ``seconds`` (the range of a
    callback's duration), ``linger`` (seconds a callback waits after its effect), ``nap``
    (seconds of a sleep in the middle, or None), ``wait`` (an event name the instance waits
    for in the middle, after the sleep, or None) and ``max_attempts``.

    Every callback appends ``start <key> <step> <pid> <time> <seconds>`` to the trace before
    its work and ``end <key> <step> <pid> <time>`` after its effect. The end line is a plain
    step's effect. An atomic step's effect is one auth ``Group`` named ``<key>/<step>/<random>``
    created in the transaction that records the step's result, so one exists per committed
    execution. The linger keeps the outcome unrecorded for a moment after the effect: a test
    can kill the worker exactly there.
    """

    name = "fault-steps"
    version = "1"

    def execute(self) -> int:
        total = 0
        for index in range(self.input["steps"]):
            if index == self.input["steps"] // 2 and self.input.get("nap"):
                self.sleep("nap", self.input["nap"])
            if index == self.input["steps"] // 2 and self.input.get("wait"):
                self.wait("wait", self.input["wait"])
            step_id = f"step-{index}"
            atomic = index % 2 == 1
            total += self.run(
                step_id,
                lambda step_id=step_id, atomic=atomic: self.work(step_id, atomic=atomic),
                max_attempts=self.input.get("max_attempts", 3),
                atomic=atomic,
            )
        return total

    def work(self, step_id: str, *, atomic: bool) -> int:
        from django.contrib.auth.models import Group

        trace = self.input["trace"]
        seconds = random.uniform(*self.input["seconds"])
        pid = os.getpid()
        trace_callback(trace, "start", self.key, step_id, pid, f"{time.time():.6f}", seconds)
        time.sleep(seconds)
        if atomic:
            Group.objects.create(name=f"{self.key}/{step_id}/{uuid.uuid4().hex[:12]}")
        trace_callback(trace, "end", self.key, step_id, pid, f"{time.time():.6f}")
        time.sleep(self.input.get("linger", 0))
        return 1


class Poison(WorkflowDefinition):
    """A step whose callback kills the worker process that runs it, every time.

    Input: ``trace`` (callbacks write the trace lines of :class:`FaultSteps`) and the poison
    step's ``max_attempts``.
    """

    name = "fault-poison"
    version = "1"

    def execute(self) -> str:
        trace = self.input["trace"]
        self.run("before", lambda: self.note(trace, "before"))
        self.run("poison", lambda: self.die(trace), max_attempts=self.input["max_attempts"])
        return self.run("after", lambda: self.note(trace, "after"))

    def note(self, trace: str, step_id: str) -> str:
        pid = os.getpid()
        trace_callback(trace, "start", self.key, step_id, pid, f"{time.time():.6f}", 0)
        trace_callback(trace, "end", self.key, step_id, pid, f"{time.time():.6f}")
        return step_id

    def die(self, trace: str) -> None:
        trace_callback(trace, "start", self.key, "poison", os.getpid(), f"{time.time():.6f}", 0)
        os._exit(1)


class FailsLater(WorkflowDefinition):
    """One run step whose first attempt waits until the file ``go`` exists, then raises;
    a later attempt (the file exists when it starts) succeeds at once."""

    name = "fault-fails-later"
    version = "1"

    def execute(self) -> str:
        return self.run("flaky", self.flaky, max_attempts=3)

    def flaky(self) -> str:
        trace, go, pid = self.input["trace"], Path(self.input["go"]), os.getpid()
        trace_callback(trace, "start", self.key, "flaky", pid, f"{time.time():.6f}", 0)
        retry = go.exists()
        deadline = time.monotonic() + 60
        while not go.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        trace_callback(trace, "end", self.key, "flaky", pid, f"{time.time():.6f}")
        if not retry:
            raise RuntimeError("The first attempt fails on purpose.")
        return "retried"


class LongStep(WorkflowDefinition):
    """One run step: its first execution takes ``seconds``, a later one a moment."""

    name = "fault-long-step"
    version = "1"

    def execute(self) -> int:
        return self.run("long", self.long, max_attempts=5)

    def long(self) -> int:
        trace, marker, pid = self.input["trace"], Path(self.input["marker"]), os.getpid()
        seconds = 0.2 if marker.exists() else self.input["seconds"]
        marker.touch()
        trace_callback(trace, "start", self.key, "long", pid, f"{time.time():.6f}", seconds)
        time.sleep(seconds)
        trace_callback(trace, "end", self.key, "long", pid, f"{time.time():.6f}")
        return pid


# Step timeouts (tests/cluster/test_step_timeout_cluster.py) ------------------------------


class TimedStep(WorkflowDefinition):
    """One run step with a timeout (input ``timeout``, seconds) whose attempts overrun it the
    way ``how`` says: ``sleep`` (time.sleep), ``loop`` (a busy Python loop) or ``c-call``
    (``os.system``, which waits for its child in C and retries when a signal interrupts
    that wait). The first attempt of ``sleep`` and ``loop`` overruns, later ones return at
    once; every ``c-call`` attempt overruns. Each attempt appends ``<attempt start, epoch
    seconds> <pid>`` to the file ``trace``.
    """

    name = "cluster-timed-step"
    version = "1"

    def execute(self) -> int:
        return self.run(
            "timed",
            self.overrun,
            timeout=self.input["timeout"],
            max_attempts=self.input.get("max_attempts", 3),
        )

    def overrun(self) -> int:
        trace, how = self.input["trace"], self.input["how"]
        first = not Path(trace).exists()
        append_line(trace, f"{time.time():.6f} {os.getpid()}")
        if how == "c-call":
            return os.system(f"sleep {self.input['hold']}")
        if not first:
            return 0
        if how == "sleep":
            time.sleep(self.input["hold"])
        else:
            deadline = time.monotonic() + self.input["hold"]
            while time.monotonic() < deadline:
                pass
        return 1


if os.environ.get("WORKERFLOW_TEST_EVERY_SECOND"):
    # Only in the clusters of tests/cluster/test_schedule_on_time.py: a schedule declared in
    # every test process would start instances in every harness test that walks time.

    class EverySecond(WorkflowDefinition):
        """A per-second schedule (six cron fields, seconds last)."""

        name = "cluster-every-second"
        version = "1"
        schedule = "* * * * * *"

        def execute(self) -> str:
            return self.input["scheduled_at"]
