"""Fixtures every layer's tests use: throwaway definitions registered for one test only
(``define``, and ``define_with`` for schedules and flow-control settings), the test harness
under its short name, an instance waiting for an event, a recorder of the status changes
the runtime announces, the step store of a claimed instance, the check that no step timer
is left armed, and `make demo`'s tour.

Helpers that are not fixtures live in ``tests/support/``: ``instances`` (reading an
instance's rows, claiming it, definition bodies), ``factories`` (rows for states the public
path cannot reach), ``flow`` (flow-control bodies and queues), ``admin`` (the console's URLs
and shop workflow), ``statements`` (counting a tick's SQL), ``threads`` (code run in
threads), ``bad_values`` (the bad-input matrix's values) and ``tracing`` (spans kept in
memory, whose ``spans`` fixture is offered here). Each layer's folder (``tests/runtime/``,
``tests/store/``, ...) mirrors the package's; docs/architecture.md lists them."""

from __future__ import annotations

import importlib
import itertools
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import django_workerflow as workerflow
from django_workerflow import WorkflowDefinition, registry
from django_workerflow.definition import drift
from django_workerflow.models import WorkflowInstance, WorkflowStatus
from django_workerflow.signals import workflow_status_changed
from django_workerflow.store.steps import StepStore
from django_workerflow.testing import Harness
from tests.support.factories import WorkflowInstanceFactory
from tests.support.flow import wait_for_go
from tests.support.instances import claim, waits_for_go
from tests.support.tracing import spans  # noqa: F401 - a fixture, for every test module

_counter = itertools.count()
DEMO_TOUR = "testproject.demoapp.workflows"


@pytest.fixture(autouse=True)
def workers_have_the_test_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    """In this suite the harness (and the cluster tests' workers) run the definitions the
    test modules declare: count those modules as imported by workers, so that the console
    says "no worker has workflow ..." (drift.missing_definition) only where a test means it,
    with a module name outside ``tests``."""
    imported = drift.worker_imported_modules
    monkeypatch.setattr(
        drift,
        "worker_imported_modules",
        lambda: imported() | {name for name in sys.modules if name.startswith("tests.")},
    )


@pytest.fixture
def define() -> Iterator[Callable[..., type[WorkflowDefinition]]]:
    """Return ``define(execute, name=None, version="2026-03-19")``: a registered definition
    whose ``execute`` is the given function, unregistered when the test ends."""
    created: list[type[WorkflowDefinition]] = []

    def make(
        execute: Callable[[Any], Any], *, name: str | None = None, version: str = "2026-03-19"
    ) -> type[WorkflowDefinition]:
        attrs = {
            "name": name or f"test-workflow-{next(_counter)}",
            "version": version,
            "execute": execute,
            "__module__": __name__,
        }
        definition = type("TestWorkflow", (WorkflowDefinition,), attrs)
        created.append(definition)
        return definition

    yield make
    for definition in created:
        registry.unregister(definition)


@pytest.fixture
def define_with() -> Iterator[Callable[..., type[WorkflowDefinition]]]:
    """``define_with(execute=wait_for_go, name=None, **settings)``: a registered definition
    with class attributes ``settings`` (max_concurrency, rate_limit, schedule, ...),
    unregistered when the test ends."""
    created: list[type[WorkflowDefinition]] = []

    def make(
        execute: Callable[[Any], Any] = wait_for_go, *, name: str | None = None, **settings: Any
    ) -> type[WorkflowDefinition]:
        attrs = {
            "name": name or f"flow-workflow-{next(_counter)}",
            "version": "1",
            "execute": execute,
            "__module__": __name__,
            **settings,
        }
        definition = type("FlowWorkflow", (WorkflowDefinition,), attrs)
        created.append(definition)
        return definition

    yield make
    for definition in created:
        registry.unregister(definition)


@pytest.fixture
def harness(workerflow_harness: Harness) -> Harness:
    """The plugin's ``workerflow_harness``, under the short name most tests use."""
    return workerflow_harness


@pytest.fixture
def waiting(
    define: Callable[..., type[WorkflowDefinition]], workerflow_harness: Harness
) -> WorkflowInstance:
    """Instance ``waiting-1`` (input ``{"n": 1}``), running, its step 'go' waiting for the
    event 'go': calls on it have rows to disturb. A module may define its own."""
    instance = workerflow.start(define(waits_for_go), key="waiting-1", input={"n": 1})
    workerflow_harness.drain()
    instance.refresh_from_db()
    assert instance.status == WorkflowStatus.RUNNING
    return instance


class StatusRecorder:
    """A ``workflow_status_changed`` receiver: the seed's ``onStatusChange_experimental``."""

    def __init__(self) -> None:
        self.changes: list[tuple[str, str, str | None]] = []

    def __call__(self, sender: Any, instance: WorkflowInstance, **kwargs: Any) -> None:
        self.changes.append((instance.key, kwargs["status"], kwargs["previous_status"]))

    def statuses(self, instance: WorkflowInstance) -> list[str]:
        return [status for key, status, _ in self.changes if key == instance.key]

    def settled(self, instance: WorkflowInstance) -> list[str]:
        """The statuses the seed's callback resolves on (it ignores 'running'; the seed's
        create() announces no 'pending')."""
        return [s for s in self.statuses(instance) if s not in ("pending", "running")]


@pytest.fixture
def status_changes() -> Iterator[StatusRecorder]:
    """Record every ``workflow_status_changed`` sent during the test."""
    recorder = StatusRecorder()
    workflow_status_changed.connect(recorder, weak=False)
    yield recorder
    workflow_status_changed.disconnect(recorder)


@pytest.fixture
def no_timer_left_armed() -> Iterator[None]:
    """The test ends with the SIGALRM handler it began with and no timer running (the step
    and instance timeouts arm one; their modules use this fixture on every test)."""
    handler = signal.getsignal(signal.SIGALRM)
    yield
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) is handler


@pytest.fixture
def claimed_store(db: None) -> Callable[..., tuple[StepStore, WorkflowInstance]]:
    """Return ``claimed_store(instance=None)``: the instance (a new one by default) claimed
    as a tick claims it, running and leased, and that tick's step store."""

    def make(instance: WorkflowInstance | None = None) -> tuple[StepStore, WorkflowInstance]:
        instance = instance if instance is not None else WorkflowInstanceFactory()
        return claim(instance), instance

    return make


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuse a test that starts real qcluster processes without the ``slow`` mark:
    ``make test-fast`` deselects ``slow`` and must stay fast."""
    for item in items:
        uses_clusters = "qcluster" in getattr(item, "fixturenames", ())
        if uses_clusters and item.get_closest_marker("slow") is None:
            raise pytest.UsageError(
                f"{item.nodeid} starts real qcluster processes: mark it @pytest.mark.slow "
                "so that `make test-fast` leaves it out."
            )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Escape lone surrogates in a report's captured output before anything sends it on: a
    test writes one on purpose (tests/values/test_unstorable_values.py), and pytest-xdist
    (``make test-fast``) hands reports between processes as UTF-8, which cannot carry them."""
    report.sections = [
        (title, text.encode("utf-8", "backslashreplace").decode("utf-8"))
        for title, text in report.sections
    ]


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Say, last and loud, that the browser tests were skipped (Playwright or Chromium is
    missing) and how to include them: `make test` is meant to run everything. Their modules
    skip as a whole when Playwright cannot be imported, so they are counted by module."""
    skipped = {
        report.nodeid.partition("::")[0]
        for report in terminalreporter.stats.get("skipped", [])
        if report.nodeid.startswith("tests/browser/")
    }
    if not skipped:
        return
    terminalreporter.write_sep(
        "=", f"{len(skipped)} browser test modules skipped", yellow=True, bold=True
    )
    # The venv this run uses, as the project names it (make's VENV), not a machine's path.
    venv = Path(sys.prefix).name
    terminalreporter.write_line(
        "Playwright or Debian's chromium is missing. Include the browser tests with "
        f"`bash .ci/install-browser {venv}` (installs both), then run again."
    )


@pytest.fixture
def demo_tour(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """`make demo`'s tour (testproject/demoapp/workflows.py, an app only the demo installs):
    its definitions, registered for this test only, and counted as imported by workers, as
    in the demo; the module is returned."""
    if DEMO_TOUR in sys.modules:
        module = importlib.reload(sys.modules[DEMO_TOUR])
    else:
        module = importlib.import_module(DEMO_TOUR)
    definitions = [
        module.InvoiceOrder,
        module.WarehouseHandover,
        module.MinuteOrderCount,
        module.PartnerSync,
        module.SearchReindex,
        module.CarrierLabel,
        module.Newsletter,
        module.CardPayment,
    ]
    imported = drift.worker_imported_modules
    monkeypatch.setattr(drift, "worker_imported_modules", lambda: imported() | {DEMO_TOUR})
    try:
        yield module
    finally:
        for definition in definitions:
            registry.unregister(definition)
