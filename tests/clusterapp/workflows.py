"""Workflows run by real qcluster subprocesses in tests/cluster.

Callbacks leave their traces in files under the directory given in the input, written with
O_APPEND so lines from several processes never interleave within a line: the tests read
them to count callback executions and to check which process ran what, and when.
"""

from __future__ import annotations

import os
import random
import time
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


class Nap(WorkflowDefinition):
    """A two-second sleep, then one step."""

    name = "cluster-nap"
    version = "1"

    def execute(self) -> str:
        self.sleep("nap", 2)
        return self.run("after", lambda: "awake")


class Touch(WorkflowDefinition):
    """Create the file named in the input: a trace that the workflow ran at all."""

    name = "cluster-touch"
    version = "1"

    def execute(self) -> None:
        self.run("touch", lambda: Path(self.input["path"]).touch())
