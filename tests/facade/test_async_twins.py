"""The async twins of the facade's verbs do what their sync verbs do: the same changes to the
rows, the same answers and the same errors, run with ``async_to_sync`` under the harness as
Django's async tests are (the twins of start, send_event and wait_result are tested beside
them, in test_wait_result.py and test_debounce.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import async_to_sync

import django_workerflow as workerflow
from django_workerflow import WorkflowInputError, WorkflowNotRegisteredError, WorkflowStateError
from django_workerflow.models import WorkflowEvent, WorkflowInstance, WorkflowStatus
from tests.support.instances import refreshed

pytestmark = pytest.mark.django_db


def run(twin: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call an async twin from this (sync) test, in the thread that holds the harness."""
    return async_to_sync(twin)(*args, **kwargs)


@pytest.fixture
def breakable(define, harness):
    """A definition whose one run step fails while ``broken["on"]``, and a failed instance
    of it, ``broken-1``."""
    broken = {"on": True}

    def work():
        if broken["on"]:
            raise RuntimeError("carrier down")
        return "shipped"

    definition = define(lambda self: self.run("ship", work, max_attempts=1))
    instance = workerflow.start(definition, key="broken-1")
    harness.drain()
    assert refreshed(instance).status == WorkflowStatus.FAILED
    return definition, broken, instance


def test_apause__pauses_a_running_instance_and_answers_false_the_second_time(waiting):
    assert run(workerflow.apause, waiting) is True
    assert refreshed(waiting).status == WorkflowStatus.PAUSED
    assert run(workerflow.apause, "waiting-1") is False


def test_aresume__resumes_a_paused_instance_and_raises_for_a_running_one(waiting):
    workerflow.pause(waiting)

    assert run(workerflow.aresume, "waiting-1") is None
    assert refreshed(waiting).status == WorkflowStatus.RUNNING
    with pytest.raises(WorkflowStateError, match="waiting-1"):
        run(workerflow.aresume, waiting)


def test_acancel__cancels_with_its_reason_and_answers_false_once_finished(waiting):
    assert run(workerflow.acancel, waiting, "user deleted") is True
    assert refreshed(waiting).status == WorkflowStatus.CANCELLED
    cancelled = WorkflowEvent.objects.get(instance=waiting, type="cancelled")
    assert cancelled.reason == "user deleted"
    assert run(workerflow.acancel, "waiting-1") is False


@pytest.mark.parametrize(
    ("twin", "args"),
    [
        (workerflow.apause, ()),
        (workerflow.aresume, ()),
        (workerflow.acancel, ()),
        (workerflow.aretry, ()),
        (workerflow.afailed_children, ()),
        (workerflow.afork, ()),
        (workerflow.areplay_verdict, ()),
    ],
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_instance_twins__raise_does_not_exist_for_an_unknown_key(twin, args):
    with pytest.raises(WorkflowInstance.DoesNotExist):
        run(twin, "no-such-key", *args)


def test_areplay_verdict__judges_as_replay_verdict_does(waiting):
    verdict = run(workerflow.areplay_verdict, "waiting-1")

    assert (verdict.ok, verdict.reason) == (True, "")
    assert verdict == workerflow.replay_verdict(waiting)


def test_astart_many__starts_in_order_and_writes_nothing_for_a_bad_item(define, harness):
    definition = define(lambda self: self.input)

    started = run(
        workerflow.astart_many,
        definition,
        [("many-1", 1), ("many-2", 2)],
        attributes={"customer": "c-42"},
    )

    assert [instance.key for instance in started] == ["many-1", "many-2"]
    assert list(WorkflowInstance.objects.filter(attributes__customer="c-42").order_by("key")) == (
        started
    )
    with pytest.raises(WorkflowInputError):
        run(workerflow.astart_many, definition, [("many-3", 3), ("", 4)])
    assert not WorkflowInstance.objects.filter(key="many-3").exists()
    harness.drain()
    assert [workerflow.wait_result(key) for key in ("many-1", "many-2")] == [1, 2]


def test_definition_twins__pause_report_and_resume_a_definition(define):
    name = define(lambda self: None).name

    assert run(workerflow.ais_definition_paused, name) is False
    assert run(workerflow.apause_definition, name, reason="carrier down", actor="ops") is True
    assert run(workerflow.ais_definition_paused, name) is True
    assert run(workerflow.apause_definition, name, reason="again") is False
    assert workerflow.is_definition_paused(name) is True
    with pytest.raises(WorkflowInputError):
        run(workerflow.apause_definition, name, reason="")
    with pytest.raises(WorkflowNotRegisteredError):
        run(workerflow.apause_definition, "no-such-definition", reason="why")
    assert run(workerflow.aresume_definition, name, reason="carrier back") is True
    assert run(workerflow.aresume_definition, name) is False
    assert workerflow.is_definition_paused(name) is False


def test_aretry__runs_a_failed_instance_again_and_raises_for_a_finished_one(breakable, harness):
    _, broken, instance = breakable
    broken["on"] = False

    assert run(workerflow.aretry, instance, "carrier back") is None
    harness.drain()

    assert refreshed(instance).status == WorkflowStatus.COMPLETED
    assert instance.result == "shipped"
    with pytest.raises(WorkflowStateError, match="broken-1"):
        run(workerflow.aretry, "broken-1")


def test_afailed_children_and_aretry_with_children__retry_the_failed_child(
    define, breakable, harness
):
    child_definition, broken, _ = breakable
    parent_definition = define(lambda self: self.child("ship", child_definition, key="kid"))
    parent = workerflow.start(parent_definition, key="parent-1")
    harness.drain()
    assert refreshed(parent).status == WorkflowStatus.FAILED

    failed = run(workerflow.afailed_children, "parent-1")

    assert [child.key for child in failed] == ["kid"]
    broken["on"] = False
    run(workerflow.aretry, parent, with_children=True)
    harness.drain()
    assert refreshed(parent).status == WorkflowStatus.COMPLETED
    assert run(workerflow.afailed_children, parent) == []


def test_afork__forks_a_failed_instance_under_a_new_key(breakable, harness):
    _, broken, source = breakable
    broken["on"] = False

    fork = run(workerflow.afork, source, key="broken-1-fork", reason="carrier back")
    harness.drain()

    assert (fork.key, refreshed(fork).status) == ("broken-1-fork", WorkflowStatus.COMPLETED)
    assert refreshed(source).status == WorkflowStatus.FAILED
    with pytest.raises(WorkflowInputError, match="no-such-step"):
        run(workerflow.afork, source, from_step="no-such-step")
