"""The public API: registration, versions, start(), and what bad input is told."""

from __future__ import annotations

import importlib.util
import inspect
import sys
import uuid

import pytest
from django.core.exceptions import ImproperlyConfigured

import django_workerflow as workerflow
from django_workerflow import (
    MaxAttemptsExceededError,
    NondeterminismError,
    NonRetryableStepError,
    WaitStepTimedOutError,
    WorkerflowError,
    WorkflowDefinition,
    WorkflowInputError,
    WorkflowNotRegisteredError,
    WorkflowStateError,
    WorkflowVersionConflictError,
    registry,
)
from django_workerflow.models import (
    InboundEvent,
    WorkflowEvent,
    WorkflowInstance,
    WorkflowStatus,
)
from tests.support.instances import waits_for_go

pytestmark = pytest.mark.django_db


@pytest.fixture
def scratch_registry():
    """Unregister every definition a test declares with a ``class`` statement."""
    before = {(name, version) for name in registry.names() for version in registry.versions(name)}
    yield
    for name in registry.names():
        for version in registry.versions(name):
            if (name, version) not in before:
                registry.unregister(registry.lookup(name, version))


def returns_input(self):
    return self.input


def instance_rows() -> int:
    return WorkflowInstance.objects.count()


# Registration -------------------------------------------------------------------------


def test_definition__registers_itself_when_its_class_is_created(scratch_registry):
    class Signup(WorkflowDefinition):
        name = "api-signup"
        version = "3"

        def execute(self):
            return None

    assert registry.get("api-signup") is Signup
    assert registry.get("api-signup", "3") is Signup


def test_definition__version_defaults_to_1(scratch_registry):
    class Unversioned(WorkflowDefinition):
        name = "api-unversioned"

        def execute(self):
            return None

    assert Unversioned.version == "1"
    assert registry.get("api-unversioned", "1") is Unversioned


def test_definition__same_name_and_version_twice_is_improperly_configured(scratch_registry):
    class First(WorkflowDefinition):
        name = "api-twice"
        version = "7"

        def execute(self):
            return 1

    with pytest.raises(ImproperlyConfigured) as raised:

        class Second(WorkflowDefinition):
            name = "api-twice"
            version = "7"

            def execute(self):
                return 2

    message = str(raised.value)
    assert "'api-twice'" in message
    assert "'7'" in message
    assert "First" in message
    assert "Second" in message
    assert "another version" in message
    assert registry.get("api-twice", "7") is First


def test_definition__several_versions_of_one_name_are_registered_side_by_side(define):
    one = define(returns_input, name="api-multi", version="1")
    two = define(returns_input, name="api-multi", version="2")

    assert registry.versions("api-multi") == ["1", "2"]
    assert registry.get("api-multi", "1") is one
    assert registry.get("api-multi", "2") is two


def test_definition__without_a_name_is_improperly_configured(scratch_registry):
    names_before = registry.names()

    with pytest.raises(ImproperlyConfigured, match="`name`"):

        class Nameless(WorkflowDefinition):
            def execute(self):
                return None

    assert registry.names() == names_before


def test_definition__with_an_empty_name_is_improperly_configured(scratch_registry):
    with pytest.raises(ImproperlyConfigured, match="`name`"):

        class Blank(WorkflowDefinition):
            name = "  "

            def execute(self):
                return None


def test_definition__without_execute_is_improperly_configured(scratch_registry):
    with pytest.raises(ImproperlyConfigured, match="execute"):

        class Lazy(WorkflowDefinition):
            name = "api-lazy"

    with pytest.raises(WorkflowNotRegisteredError):
        registry.get("api-lazy")


def test_definition__abstract_base_is_not_registered_but_its_subclasses_are(scratch_registry):
    names_before = registry.names()

    class Base(WorkflowDefinition):
        abstract = True
        name = "api-abstract-base"

        def execute(self):
            return self.greeting()

        def greeting(self):
            return "hello"

    assert registry.names() == names_before

    class Concrete(Base):
        name = "api-concrete"

    assert registry.get("api-concrete") is Concrete
    with pytest.raises(WorkflowNotRegisteredError):
        registry.get("api-abstract-base")


def test_start__without_version_picks_the_highest_version_numerically(define):
    define(returns_input, name="api-numeric", version="2")
    define(returns_input, name="api-numeric", version="10")
    define(returns_input, name="api-numeric", version="9")

    instance = workerflow.start("api-numeric")

    assert instance.definition_version == "10"


def test_start__without_version_picks_the_latest_date_version(define):
    define(returns_input, name="api-dated", version="2026-03-19")
    define(returns_input, name="api-dated", version="2026-11-02")
    define(returns_input, name="api-dated", version="2025-12-31")

    instance = workerflow.start("api-dated")

    assert instance.definition_version == "2026-11-02"


def test_start__with_a_class_uses_that_class_version(define):
    old = define(returns_input, name="api-by-class", version="2")
    define(returns_input, name="api-by-class", version="10")

    instance = workerflow.start(old)

    assert instance.definition_name == "api-by-class"
    assert instance.definition_version == "2"


def test_start__with_an_explicit_version_uses_it(define):
    define(returns_input, name="api-explicit", version="1")
    define(returns_input, name="api-explicit", version="2")

    instance = workerflow.start("api-explicit", version="1")

    assert instance.definition_version == "1"


def test_start__runs_the_version_it_pinned(define, harness):
    define(lambda self: "old", name="api-pinned-run", version="1")
    define(lambda self: "new", name="api-pinned-run", version="2")
    old = workerflow.start("api-pinned-run", version="1")
    new = workerflow.start("api-pinned-run")

    harness.drain()

    old.refresh_from_db()
    new.refresh_from_db()
    assert (old.result, new.result) == ("old", "new")


def test_start__unknown_name_raises_not_registered_and_writes_nothing():
    with pytest.raises(WorkflowNotRegisteredError, match="'api-nobody'"):
        workerflow.start("api-nobody", key="k", input={"a": 1})

    assert instance_rows() == 0
    assert WorkflowEvent.objects.count() == 0


def test_start__unknown_version_raises_not_registered_and_writes_nothing(define):
    define(returns_input, name="api-known", version="1")

    with pytest.raises(WorkflowNotRegisteredError, match="'5'"):
        workerflow.start("api-known", key="k", version="5")

    assert instance_rows() == 0
    assert WorkflowEvent.objects.count() == 0


def test_not_registered_error__is_a_workerflow_error_and_a_lookup_error():
    assert issubclass(WorkflowNotRegisteredError, WorkerflowError)
    assert issubclass(WorkflowNotRegisteredError, LookupError)


def test_app__autodiscovers_the_workflows_module_of_installed_apps():
    # The example shop app gets a `workflows` module in a later change; until then there
    # is nothing to discover.
    if importlib.util.find_spec("testproject.shop.workflows") is None:
        pytest.skip("testproject.shop has no workflows module yet")
    module = sys.modules.get("testproject.shop.workflows")
    assert module is not None, "django.setup() did not import testproject.shop.workflows"
    definitions = [
        value
        for value in vars(module).values()
        if inspect.isclass(value)
        and issubclass(value, WorkflowDefinition)
        and value.__module__ == module.__name__
        and not value.__dict__.get("abstract", False)
    ]
    assert definitions, "testproject.shop.workflows defines no workflow"
    for definition in definitions:
        assert registry.lookup(definition.name, definition.version) is definition


# start() ------------------------------------------------------------------------------


def test_start__returns_a_pending_instance_with_a_created_event(define):
    definition = define(returns_input)

    instance = workerflow.start(definition, key="order-1", input={"id": 1})

    assert instance.pk is not None
    assert instance.status == WorkflowStatus.PENDING
    assert instance.input == {"id": 1}
    assert instance.definition_name == definition.name
    assert list(instance.workflow_events.values_list("type", flat=True)) == ["created"]


def test_start__is_idempotent_on_key(define):
    definition = define(returns_input)
    first = workerflow.start(definition, key="order-1", input={"attempt": 1})

    second = workerflow.start(definition, key="order-1", input={"attempt": 2})

    assert second.pk == first.pk
    assert second.input == {"attempt": 1}
    assert instance_rows() == 1
    assert list(second.workflow_events.values_list("type", flat=True)) == ["created"]


def test_start__on_an_existing_key_keeps_the_first_input_when_it_runs(define, harness):
    definition = define(returns_input)
    workerflow.start(definition, key="order-1", input={"attempt": 1})
    workerflow.start(definition, key="order-1", input={"attempt": 2})

    harness.drain()

    assert WorkflowInstance.objects.get(key="order-1").result == {"attempt": 1}


def test_start__default_key_is_a_new_uuid(define):
    definition = define(returns_input)

    first = workerflow.start(definition)
    second = workerflow.start(definition)

    assert str(uuid.UUID(first.key)) == first.key
    assert first.key != second.key
    assert instance_rows() == 2


def test_start__without_version_on_an_existing_key_keeps_the_pinned_version(define):
    define(returns_input, name="api-pin", version="1")
    first = workerflow.start("api-pin", key="k", version="1")
    define(returns_input, name="api-pin", version="2")

    again = workerflow.start("api-pin", key="k")

    assert again.pk == first.pk
    assert again.definition_version == "1"


def test_start__other_version_on_a_pending_instance_raises_version_conflict(define):
    define(returns_input, name="api-conflict", version="1")
    define(returns_input, name="api-conflict", version="2")
    workerflow.start("api-conflict", key="k", version="1")

    with pytest.raises(WorkflowVersionConflictError) as raised:
        workerflow.start("api-conflict", key="k", version="2")

    assert str(raised.value) == (
        "Workflow definition version is already pinned to '1' and cannot be changed to '2'. "
        "Instance 'k' has status 'pending' and keeps its version until it finishes: start it "
        "without a version, or start the new version under another key."
    )
    assert WorkflowInstance.objects.get(key="k").definition_version == "1"


def test_start__other_version_on_a_running_instance_raises_version_conflict(define, harness):
    define(waits_for_go, name="api-conflict-running", version="2026-03-19")
    newer = define(waits_for_go, name="api-conflict-running", version="2026-04-01")
    workerflow.start("api-conflict-running", key="k", version="2026-03-19")
    harness.drain()
    assert WorkflowInstance.objects.get(key="k").status == WorkflowStatus.RUNNING

    with pytest.raises(WorkflowVersionConflictError) as raised:
        workerflow.start(newer, key="k")

    assert str(raised.value) == (
        "Workflow definition version is already pinned to '2026-03-19' and cannot be "
        "changed to '2026-04-01'. Instance 'k' has status 'running' and keeps its version "
        "until it finishes: start it without a version, or start the new version under "
        "another key."
    )


def test_start__other_version_on_a_terminal_instance_is_a_noop(define, harness):
    define(returns_input, name="api-conflict-done", version="1")
    define(returns_input, name="api-conflict-done", version="2")
    first = workerflow.start("api-conflict-done", key="k", version="1", input="first")
    harness.drain()

    again = workerflow.start("api-conflict-done", key="k", version="2", input="second")

    assert again.pk == first.pk
    assert again.definition_version == "1"
    assert again.status == WorkflowStatus.COMPLETED
    assert again.result == "first"
    assert instance_rows() == 1
    assert harness.drain() == 0


def test_version_conflict_error__is_a_workerflow_error():
    assert issubclass(WorkflowVersionConflictError, WorkerflowError)


def test_start__with_something_that_is_not_a_definition_raises_input_error():
    with pytest.raises(WorkflowInputError, match="definition name or class"):
        workerflow.start(42)  # type: ignore[arg-type]

    assert instance_rows() == 0


def test_start__key_of_another_definition_raises_input_error(define):
    first = define(returns_input)
    other = define(returns_input)
    workerflow.start(first, key="shared")

    with pytest.raises(WorkflowInputError, match="'shared'"):
        workerflow.start(other, key="shared")

    assert WorkflowInstance.objects.get(key="shared").definition_name == first.name


def test_input_error__is_a_workerflow_error_and_a_value_error():
    assert issubclass(WorkflowInputError, WorkerflowError)
    assert issubclass(WorkflowInputError, ValueError)


@pytest.mark.parametrize(
    "error",
    [
        NonRetryableStepError,
        MaxAttemptsExceededError,
        WaitStepTimedOutError,
        WorkflowVersionConflictError,
        WorkflowNotRegisteredError,
        WorkflowInputError,
        WorkflowStateError,
        NondeterminismError,
    ],
)
def test_exceptions__are_exported_under_one_base(error):
    assert issubclass(error, WorkerflowError)
    assert getattr(workerflow, error.__name__) is error
    assert error.__name__ in workerflow.__all__


# Unknown instances and bad operations --------------------------------------------------


def test_send_event__accepts_the_instance_or_its_key(define, harness):
    instance = workerflow.start(define(lambda self: [self.wait("a", "a"), self.wait("b", "b")]))
    harness.drain()

    by_object = workerflow.send_event(instance, "a", 1)
    by_key = workerflow.send_event(instance.key, "b", 2)
    harness.drain()

    assert isinstance(by_object, InboundEvent)
    assert isinstance(by_key, InboundEvent)
    instance.refresh_from_db()
    assert instance.result == [1, 2]


@pytest.mark.parametrize(
    ("reach", "status"),
    [
        pytest.param(lambda instance, harness: None, "pending", id="pending"),
        pytest.param(lambda instance, harness: harness.drain(), "running", id="running"),
        pytest.param(
            lambda instance, harness: workerflow.cancel(instance), "cancelled", id="cancelled"
        ),
        pytest.param(
            lambda instance, harness: (
                harness.drain(),
                workerflow.send_event(instance, "go"),
                harness.drain(),
            ),
            "completed",
            id="completed",
        ),
    ],
)
def test_resume__of_an_instance_that_is_not_paused_raises_state_error(
    define, harness, reach, status
):
    instance = workerflow.start(define(waits_for_go))
    reach(instance, harness)
    events_before = WorkflowEvent.objects.count()

    with pytest.raises(WorkflowStateError) as raised:
        workerflow.resume(instance)

    assert str(raised.value) == (
        f"Cannot resume workflow: expected status 'paused' but got '{status}'. Instance "
        f"'{instance.key}' has status '{status}' and was left as it is: only a paused "
        "instance resumes."
    )
    assert WorkflowEvent.objects.count() == events_before
    instance.refresh_from_db()
    assert instance.status == status


def test_resume__of_a_failed_instance_raises_state_error(define, harness):
    def execute(self):
        raise RuntimeError("broken")

    instance = workerflow.start(define(execute))
    harness.drain()

    with pytest.raises(WorkflowStateError) as raised:
        instance.resume()

    assert str(raised.value) == (
        "Cannot resume workflow: expected status 'paused' but got 'failed'. Instance "
        f"'{instance.key}' has status 'failed' and was left as it is: only a paused "
        "instance resumes."
    )


def test_state_error__is_a_workerflow_error():
    assert issubclass(WorkflowStateError, WorkerflowError)


def test_step_helpers__outside_the_engine_raise_state_error():
    class Direct(WorkflowDefinition):
        abstract = True

        def execute(self):
            return self.run("x", lambda: 1)

    with pytest.raises(WorkflowStateError, match=r"django_workerflow\.start\(\)"):
        Direct(key="k", input=None).execute()


def test_pause_and_cancel__report_whether_anything_changed(define, harness):
    instance = workerflow.start(define(waits_for_go))

    assert workerflow.pause(instance) is False  # pending: nothing to pause yet
    harness.drain()
    assert workerflow.pause(instance) is True
    assert workerflow.pause(instance) is False
    assert workerflow.cancel(instance, reason="user deleted") is True
    assert workerflow.cancel(instance) is False
    assert instance.status == WorkflowStatus.CANCELLED
    assert instance.workflow_events.last().reason == "user deleted"
