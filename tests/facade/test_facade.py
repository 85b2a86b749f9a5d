"""The public facade: every verb has an async twin with the same parameters, every verb says
what it returns and raises, hooks are declared on the base class, the values it returns live
in ``values/``, every error is a WorkerflowError, and ``registry`` is not public."""

from __future__ import annotations

import inspect
from importlib import import_module

import pytest
from django.core.exceptions import ImproperlyConfigured

import django_workerflow as workerflow
from django_workerflow import WorkflowDefinition
from django_workerflow.models import WorkflowInstance

#: The verbs: the facade's functions, each sync one with its async twin (Django's ``a``
#: prefix: ``pause`` and ``apause``, ``wait_result`` and ``await_result``).
VERBS = sorted(name for name in workerflow.__all__ if inspect.isfunction(getattr(workerflow, name)))
SYNC_VERBS = [name for name in VERBS if not inspect.iscoroutinefunction(getattr(workerflow, name))]
TWINS = [(getattr(workerflow, name), getattr(workerflow, f"a{name}")) for name in SYNC_VERBS]
#: The values the verbs return or hand to a definition's hooks.
VALUES = ["Outcome", "Progress", "ReplayVerdict", "SettledResult"]


def test_facade__every_sync_verb_has_an_async_twin_and_every_twin_a_sync_verb():
    twins = {f"a{name}" for name in SYNC_VERBS}
    assert set(VERBS) - set(SYNC_VERBS) == twins
    assert len(SYNC_VERBS) == 15
    for name in twins:
        assert inspect.iscoroutinefunction(getattr(workerflow, name)), name


@pytest.mark.parametrize(("sync", "async_"), TWINS, ids=lambda f: f.__name__)
def test_facade__sync_and_async_twins_take_the_same_parameters(sync, async_):
    assert inspect.signature(sync).parameters.keys() == inspect.signature(async_).parameters.keys()
    for name, parameter in inspect.signature(sync).parameters.items():
        twin = inspect.signature(async_).parameters[name]
        assert (parameter.kind, parameter.default) == (twin.kind, twin.default), name
    assert inspect.signature(sync).return_annotation == inspect.signature(async_).return_annotation


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


def test_facade__registry_is_importable_but_not_public():
    assert "registry" not in workerflow.__all__
    assert callable(import_module("django_workerflow.registry").get)


@pytest.mark.parametrize("name", VALUES)
def test_facade__public_values_live_in_the_values_layer(name):
    assert name in workerflow.__all__
    assert getattr(workerflow, name).__module__.startswith("django_workerflow.values."), name


def test_facade__replay_errors_are_ours_and_not_improperly_configured():
    for error in (workerflow.NondeterminismError, workerflow.DuplicateStepIdError):
        assert issubclass(error, workerflow.ReplayError)
        assert not issubclass(error, ImproperlyConfigured), error
        assert not issubclass(error, workerflow.WorkflowDefinitionError), error
    assert issubclass(workerflow.ReplayError, workerflow.WorkerflowError)
    assert "ReplayError" in workerflow.__all__


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
        from asgiref.sync import sync_to_async
        from django.db import connection

        # sync_to_async's thread outlives this test: close its connection at the start and
        # the end, as a site does around a request (not an earlier test's, not left open).
        await sync_to_async(lambda: connection.close())()
        try:
            instance = await workerflow.astart(definition, key="async-priority", priority=3)
            dropped = await workerflow.asend_event("no-such-key", "go", missing_ok=True)
        finally:
            await sync_to_async(lambda: connection.close())()
        return instance.priority, dropped

    assert asyncio.run(body()) == (3, None)
