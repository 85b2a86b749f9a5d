"""The public facade: twins take the same parameters, every verb says what it returns and
raises, hooks are declared on the base class, and every error is a WorkerflowError."""

from __future__ import annotations

import inspect

import pytest
from django.core.exceptions import ImproperlyConfigured

import django_workerflow as workerflow
from django_workerflow import WorkflowDefinition
from django_workerflow.models import WorkflowInstance

TWINS = [
    (workerflow.start, workerflow.astart),
    (workerflow.send_event, workerflow.asend_event),
    (workerflow.wait_result, workerflow.await_result),
    (workerflow.wait_progress, workerflow.await_progress),
]
VERBS = [
    "start",
    "start_many",
    "send_event",
    "pause",
    "resume",
    "cancel",
    "retry",
    "fork",
    "wait_result",
    "astart",
    "asend_event",
    "await_result",
    "wait_progress",
    "await_progress",
]


@pytest.mark.parametrize(("sync", "async_"), TWINS, ids=lambda f: f.__name__)
def test_facade__sync_and_async_twins_take_the_same_parameters(sync, async_):
    assert inspect.signature(sync).parameters.keys() == inspect.signature(async_).parameters.keys()
    for name, parameter in inspect.signature(sync).parameters.items():
        twin = inspect.signature(async_).parameters[name]
        assert (parameter.kind, parameter.default) == (twin.kind, twin.default), name


@pytest.mark.parametrize("name", VERBS)
def test_facade__every_verb_says_what_it_returns_and_raises(name):
    verb = getattr(workerflow, name)
    assert name in workerflow.__all__
    doc = inspect.getdoc(verb) or ""
    if verb.__name__.startswith("a") and "for async code" in doc:
        return  # "the same parameters, returns and errors" as its twin
    assert "Return" in doc or "return" in doc, name
    assert "Raise" in doc or "raise" in doc, name


def test_facade__a_key_or_an_instance_is_called_instance_everywhere():
    for name in [
        "send_event",
        "pause",
        "resume",
        "cancel",
        "retry",
        "fork",
        "wait_result",
        "wait_progress",
    ]:
        first = next(iter(inspect.signature(getattr(workerflow, name)).parameters))
        assert first == "instance", name


def test_facade__start_and_start_many_name_the_definition_alike():
    for verb in (workerflow.start, workerflow.start_many, workerflow.astart):
        assert next(iter(inspect.signature(verb).parameters)) == "definition"


def test_facade__every_instance_method_has_a_module_level_verb():
    for name in ["pause", "resume", "cancel", "send_event", "retry", "fork", "wait_result"]:
        assert callable(getattr(WorkflowInstance, name))
        assert callable(getattr(workerflow, name))
    assert callable(WorkflowInstance.await_result)


def test_facade__on_finish_is_declared_on_the_base_class_with_its_signature():
    parameters = list(inspect.signature(WorkflowDefinition.on_finish).parameters)
    assert parameters == ["self", "outcome"]


def test_facade__an_invalid_declaration_raises_a_workflow_definition_error():
    with pytest.raises(workerflow.WorkflowDefinitionError) as raised:
        type("Broken", (WorkflowDefinition,), {"__module__": __name__})
    assert isinstance(raised.value, workerflow.WorkerflowError)
    assert isinstance(raised.value, ImproperlyConfigured)
    assert "implement `execute(self)`" in str(raised.value)


def test_facade__step_outcome_error_is_exported_as_the_base_of_step_failures():
    assert issubclass(workerflow.WorkflowFailedError, workerflow.StepOutcomeError)
    assert issubclass(workerflow.WaitStepTimedOutError, workerflow.StepOutcomeError)
    assert "StepOutcomeError" in workerflow.__all__


@pytest.mark.django_db(transaction=True)
def test_facade__astart_takes_a_priority_and_asend_event_takes_missing_ok(define):
    import asyncio

    definition = define(lambda self: self.wait("go", "go"))

    async def body() -> tuple[int, object]:
        instance = await workerflow.astart(definition, key="async-priority", priority=3)
        dropped = await workerflow.asend_event("no-such-key", "go", missing_ok=True)
        return instance.priority, dropped

    assert asyncio.run(body()) == (3, None)
