"""Drive workflows in tests: a virtual clock and inline ticks, no worker needed; replay
exported histories (``replay()``) and try changed definitions (``registered()``).

def test_onboarding(workerflow_harness):
    instance = workerflow.start("onboarding", input={"user_id": 1})
    workerflow_harness.drain()                    # runs until the 3-day sleep
    workerflow_harness.advance(timedelta(days=3)) # the sleep elapses, the wait begins
    workerflow.send_event(instance.key, "survey.answered", {"score": 9})
    workerflow_harness.drain()
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from django.db import DEFAULT_DB_ALIAS
from django.test import TestCase

from django_workerflow import registry
from django_workerflow.exceptions import NondeterminismError, WorkflowInputError
from django_workerflow.values.clock import SystemClock, VirtualClock, set_clock
from django_workerflow.values.control_flow import WorkerDeath as WorkerDeath  # re-exported
from django_workerflow.values.jsonvalue import check_aware, to_timedelta

if TYPE_CHECKING:
    from django_workerflow.definition.workflow import WorkflowDefinition
    from django_workerflow.deploy.replay import ReplayReport


class Harness:
    """Swap in a virtual clock, silence the worker bells, and run due ticks inline.

    It works inside ordinary ``django_db`` tests: the test's wrapping transaction holds
    back on-commit callbacks (such as ``workflow_status_changed``), so the harness captures
    them with Django's ``TestCase.captureOnCommitCallbacks()`` and runs the ones captured so
    far whenever it drains. Ticks run the production code; one difference is
    Django's, not the harness's: inside a test's wrapping transaction each step write on
    SQLite is a savepoint of it instead of its own ``BEGIN IMMEDIATE`` transaction (SQLite
    cannot open a transaction inside another), so a ``transactional_db`` test is the one
    that exercises that path.
    """

    def __init__(
        self,
        start: datetime | None = None,
        *,
        max_ticks: int = 10_000,
        schedules: bool | Iterable[str] = False,
    ) -> None:
        # Models need the app registry; the pytest plugin imports this before Django's setup.
        from django_workerflow.workers import bells

        self.clock = VirtualClock(start)
        # Scheduled workflows run only when asked (True: all; or these names): a project's
        # nightly schedule would otherwise start in every test that walks past 03:00.
        self.schedules: frozenset[str] | None = (
            None if schedules is True else frozenset(() if schedules is False else schedules)
        )
        self.max_ticks = max_ticks
        self.ticks = 0
        self._previous_clock: SystemClock | VirtualClock | None = None
        self._suppression = bells.suppressed()
        self._capture: AbstractContextManager[Any] | None = None
        self._callbacks: list[Callable[[], Any]] = []
        self._schedules_synced = False

    def __enter__(self) -> Harness:
        # Models need the app registry; the pytest plugin imports this before Django's setup.
        from django_workerflow.runtime.composition.results import set_drainer

        self._previous_clock = set_clock(self.clock)
        self._suppression.__enter__()
        self._start_capture()
        set_drainer(self.drain)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Models need the app registry; the pytest plugin imports this before Django's setup.
        from django_workerflow.runtime.composition.results import set_drainer

        try:
            if exc_type is None:
                self.run_on_commit_callbacks()
            self._stop_capture()
        finally:
            set_drainer(None)
            self._suppression.__exit__(exc_type, exc, tb)
            if self._previous_clock is not None:
                set_clock(self._previous_clock)

    def now(self) -> datetime:
        """The virtual time."""
        return self.clock.now()

    def drain(self) -> int:
        """Tick every instance whose alarm is due and deliver the due ``on_finish`` hooks,
        until nothing is due; return the ticks run."""
        # Models need the app registry; the pytest plugin imports this before Django's setup.
        from django_workerflow.models import WorkflowInstance
        from django_workerflow.runtime.composition import deliveries
        from django_workerflow.runtime.tick import tick

        ran = 0
        self.run_on_commit_callbacks()
        while True:
            self._start_scheduled()
            due = list(WorkflowInstance.objects.due(self.now()).values_list("pk", flat=True))
            if not due:
                if deliveries.deliver_due():
                    self.run_on_commit_callbacks()
                    continue
                return ran
            for pk in due:
                tick(pk)
                self.run_on_commit_callbacks()
                ran += 1
                self.ticks += 1
                if ran >= self.max_ticks:
                    raise RuntimeError(
                        f"drain() ran {ran} ticks and instances are still due; a workflow "
                        "probably wakes itself forever."
                    )

    def advance(self, duration: float | timedelta) -> int:
        """Walk the virtual clock forward by ``duration``; see :meth:`advance_to`."""
        delta = to_timedelta(duration, what="The harness advance")
        return self.advance_to(self.now() + delta)

    def advance_to(self, when: datetime) -> int:
        """Walk the virtual clock forward to ``when``, as time would pass: stop at each alarm
        that falls due on the way, in time order, and drain there; then drain at ``when``.
        Return the ticks run. Each stop's ticks may set new alarms within the span, and the
        walk stops at those too, exactly as a worker would meet them."""
        check_aware(when, what="The harness advance_to time")
        if when < self.now():
            raise WorkflowInputError(
                f"The harness cannot move its clock back from {self.now().isoformat()} to "
                f"{when.isoformat()}; create a new Harness(start=...) to begin earlier."
            )
        ran = self.drain()
        stops = 0
        while True:
            upcoming = _next_stop(self.now(), when, self.schedules)
            delivery = _next_delivery(self.now(), when)
            if delivery is not None and (upcoming is None or delivery < upcoming):
                upcoming = delivery
            if upcoming is None:
                break
            stops += 1
            if stops > self.max_ticks:
                raise RuntimeError(
                    f"advance stopped at {stops} alarms on the way to {when.isoformat()}; a "
                    "workflow probably wakes itself forever."
                )
            self.clock.advance(upcoming - self.now())
            ran += self.drain()
        self.clock.advance(when - self.now())
        return ran + self.drain()

    def _start_scheduled(self) -> None:
        """Start the due occurrences of the schedules the harness runs, at the virtual time.
        At the first drain the schedule rows are synced with the definitions and start from
        the virtual now."""
        # Models need the app registry; the pytest plugin imports this before Django's setup.
        from django_workerflow.runtime.flow import schedules

        if self.schedules is not None and not self.schedules:
            return
        if not self._schedules_synced:
            schedules.sync(self.now(), restart=True)
            self._schedules_synced = True
        schedules.fire_due(self.now(), names=self.schedules)
        self.run_on_commit_callbacks()

    def run_on_commit_callbacks(self) -> None:
        """Run the on-commit callbacks that a test's wrapping transaction holds back."""
        while True:
            callbacks = self._stop_capture()
            # Callbacks that register callbacks: the next capture holds those.
            self._start_capture()
            if not callbacks:
                return
            for callback in callbacks:
                callback()

    def _start_capture(self) -> None:
        # Outside a transaction, callbacks run at once and nothing is captured.
        self._capture = TestCase.captureOnCommitCallbacks(using=DEFAULT_DB_ALIAS)
        self._callbacks = self._capture.__enter__()

    def _stop_capture(self) -> list[Callable[[], Any]]:
        """End the current capture and return the callbacks registered during it."""
        capture, self._capture = self._capture, None
        if capture is None:
            return []
        capture.__exit__(None, None, None)
        return self._callbacks


@contextmanager
def registered(*definitions: type[WorkflowDefinition]) -> Iterator[None]:
    """Register ``definitions`` for the duration of the block, replacing those registered
    under the same name and version, and restore the registry afterwards.

    Declare the changed definition with ``register=False`` (a class with a taken name and
    version is otherwise refused when it is created), or create it inside the block, where
    it replaces its namesake too::

        class Onboarding(WorkflowDefinition, register=False):  # same name and version
            name = "onboarding"
            ...

        with testing.registered(Onboarding):
            call_command("workerflow", "check-replay")
    """
    saved = registry.snapshot()
    registry._replacing += 1  # noqa: SLF001 - testing.registered() is the registry's sanctioned replacement hook
    try:
        for definition in definitions:
            registry.register(definition)
        yield
    finally:
        registry._replacing -= 1  # noqa: SLF001 - testing.registered() is the registry's sanctioned replacement hook
        registry.restore(saved)


def replay(
    history: dict[str, Any] | str | Path,
    definition: type[WorkflowDefinition] | None = None,
    *,
    allow_new_steps: bool = False,
) -> ReplayReport:
    """Replay an exported history against the code of its workflow now registered (or
    against ``definition``), calling no callback.

    Raise :class:`NondeterminismError` naming the step and what differed when the code
    would break the history (a new step reached where the history recorded another breaks
    it too, unless ``allow_new_steps``: for a step added there, not a rename); otherwise
    return a :class:`~django_workerflow.deploy.replay.ReplayReport` (check its ``unreached`` for
    recorded steps the code no longer reaches). Runs in a read-only transaction that is rolled back,
    so the test needs database access (``django_db``).
    """
    # Models need the app registry; the pytest plugin imports this before Django's setup.
    from django_workerflow.deploy import exports
    from django_workerflow.deploy.replay import replay_records, unregistered_problem
    from django_workerflow.store.readonly import read_only_transaction

    loaded = exports.load(history)
    records = exports.records(loaded)
    name, version, key = str(loaded["name"]), str(loaded["version"]), str(loaded["key"])
    definition_class = definition or registry.lookup(name, version)
    if definition_class is None:
        problem = unregistered_problem(key, name, version, registry.versions(name))
        raise NondeterminismError(problem.message)
    recorded_error = (
        (str(loaded.get("error_name") or ""), str(loaded.get("error_message") or ""))
        if loaded.get("status") == "failed"
        else None
    )
    with read_only_transaction():
        report = replay_records(
            definition_class,
            key=key,
            input=loaded.get("input"),
            records=records,
            recorded_error=recorded_error,
        )
    for problem in report.breaking(allow_new_steps=allow_new_steps):
        raise NondeterminismError(problem.message)
    return report


def _next_stop(now: datetime, when: datetime, schedules: frozenset[str] | None) -> datetime | None:
    """The earliest instance alarm or occurrence of a schedule the harness runs (``None``:
    all) in ``(now, when]``."""
    # Models need the app registry; the pytest plugin imports this before Django's setup.
    from django_workerflow.models import WorkflowInstance, WorkflowSchedule

    alarm = (
        WorkflowInstance.objects.active()
        .unheld()
        .filter(alarm_at__gt=now, alarm_at__lte=when)
        .order_by("alarm_at")
        .values_list("alarm_at", flat=True)
        .first()
    )
    rows = WorkflowSchedule.objects.filter(
        enabled=True, in_code=True, next_run_at__gt=now, next_run_at__lte=when
    )
    if schedules is not None:
        rows = rows.filter(name__in=schedules)
    occurrence = rows.order_by("next_run_at").values_list("next_run_at", flat=True).first()
    found = [moment for moment in (alarm, occurrence) if moment is not None]
    return min(found) if found else None


def _next_delivery(after: datetime, until: datetime) -> datetime | None:
    """When the next pending on_finish delivery falls due (a retry, or a lease running
    out) within ``(after, until]``."""
    # Models need the app registry; the pytest plugin imports this before Django's setup.
    from django_workerflow.models import FinishDelivery

    pending = FinishDelivery.objects.pending()
    times = [
        pending.filter(**{f"{field}__gt": after, f"{field}__lte": until})
        .order_by(field)
        .values_list(field, flat=True)
        .first()
        for field in ("next_attempt_at", "leased_until")
    ]
    due = [time for time in times if time is not None]
    return min(due) if due else None
