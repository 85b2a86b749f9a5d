"""The workflows the benchmark measures (registered in the bench process and its clusters)."""

from __future__ import annotations

from pathlib import Path

from django_workerflow import WorkflowDefinition


class Stepper(WorkflowDefinition):
    """``input["steps"]`` trivial run steps back to back (sequential and fleet)."""

    name = "bench-steps"
    version = "1"

    def execute(self) -> int:
        for index in range(self.input["steps"]):
            self.run(f"step-{index}", lambda index=index: index)
        return self.input["steps"]


class StepsThenSleep(WorkflowDefinition):
    """``input["steps"]`` trivial run steps, then an hour's sleep (replay and statements)."""

    name = "bench-steps-then-sleep"
    version = "1"

    def execute(self) -> None:
        for index in range(self.input["steps"]):
            self.run(f"step-{index}", lambda index=index: index)
        self.sleep("rest", 3600)


class Sleeper(WorkflowDefinition):
    """One sleep of ``input["seconds"]``: its lateness is resolved_at - wake_at."""

    name = "bench-sleep"
    version = "1"

    def execute(self) -> None:
        self.sleep("nap", self.input["seconds"])


class Retrier(WorkflowDefinition):
    """A run step whose first attempt fails, retried after a 250 ms backoff."""

    name = "bench-retry"
    version = "1"

    def execute(self) -> None:
        marker = Path(self.input["dir"]) / self.key
        self.run("flaky", lambda: self.fail_once(marker), backoff=lambda attempt: 0.25)

    @staticmethod
    def fail_once(marker: Path) -> None:
        if not marker.exists():
            marker.touch()
            raise RuntimeError("The first attempt fails on purpose.")


class Waiter(WorkflowDefinition):
    """Waits for the event "go", then runs one step."""

    name = "bench-event"
    version = "1"

    def execute(self) -> None:
        self.wait("go", "go")
        self.run("after", lambda: None)


class Parent(WorkflowDefinition):
    """Starts a "bench-event" child, waits for it, then runs one step."""

    name = "bench-parent"
    version = "1"

    def execute(self) -> None:
        self.child("child", "bench-event")
        self.run("after-child", lambda: None)


class DeployCheck(WorkflowDefinition):
    """20 trivial run steps, then an hour's sleep: what check-replay replays (scenario
    ``check_replay``)."""

    name = "bench-deploy"
    version = "1"

    def execute(self) -> None:
        for index in range(20):
            self.run(f"step-{index}", lambda index=index: index)
        self.sleep("rest", 3600)


class Crash(WorkflowDefinition):
    """A step whose first attempt writes its pid to ``input["pidfile"]`` and sleeps until
    the benchmark kills it; the retry returns at once (scenario ``recovery``, kill-to-retry)."""

    name = "bench-crash"
    version = "1"

    def execute(self) -> int:
        return self.run("slow", lambda: self.slow(Path(self.input["pidfile"])))

    @staticmethod
    def slow(pidfile: Path) -> int:
        import os
        import time

        if not pidfile.exists():
            pidfile.write_text(str(os.getpid()))
            time.sleep(120)
        return os.getpid()


class Limited(WorkflowDefinition):
    """One trivial run step, at most ten at once (the queue scenario)."""

    name = "bench-limited"
    version = "1"
    max_concurrency = 10

    def execute(self) -> None:
        self.run("work", lambda: None)


class TimedStepper(Stepper):
    """The sequential scenario's steps, each limited by the definition's ``step_timeout``
    (scenario ``timeouts``: what a step that sets a timeout pays for its timer)."""

    name = "bench-steps-timeout"
    step_timeout = 60
