"""Histories as test fixtures: ``workerflow export KEY`` writes one, ``testing.replay()``
replays it against the current code without calling callbacks or keeping a write."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test.utils import CaptureQueriesContext

import django_workerflow as workerflow
from django_workerflow import NondeterminismError, WorkflowDefinition, WorkflowInputError, testing
from django_workerflow.deploy.exports import HISTORY_FORMAT
from django_workerflow.deploy.replay import ReplayEnding
from tests.support.sql_writes import WRITE

pytestmark = pytest.mark.django_db

CALLS: list[str] = []


class Signup(WorkflowDefinition, register=False):
    name = "signup"
    version = "3"

    def execute(self):
        account = self.run("create-account", lambda: CALLS.append("account") or {"id": 7})
        self.run("outer", lambda: self.run("inner", lambda: CALLS.append("inner") or 1))
        self.sleep("nap", 3600)
        answer = self.wait("confirm", "confirmed", timeout=7200)
        return {"account": account["id"], "answer": answer}


@pytest.fixture
def exported(workerflow_harness, tmp_path):
    """An instance of 'signup' asleep in 'nap', exported to a file; callbacks forgotten."""
    with testing.registered(Signup):
        workerflow.start("signup", key="signup-1", input={"email": "a@example.com"})
        workerflow_harness.drain()
        path = tmp_path / "signup-1.json"
        out = StringIO()
        call_command("workerflow", "export", "signup-1", "-o", str(path), stdout=out)
    assert "Wrote the history of 'signup-1'" in out.getvalue()
    CALLS.clear()
    return path


def test_export__writes_the_whole_history_as_json(exported):
    history = json.loads(exported.read_text())
    assert history["format"] == HISTORY_FORMAT
    assert (history["name"], history["version"], history["key"]) == ("signup", "3", "signup-1")
    assert history["input"] == {"email": "a@example.com"}
    assert history["status"] == "running"
    steps = {step["step_id"]: step for step in history["steps"]}
    assert list(steps) == ["create-account", "outer", "inner", "nap"]
    assert steps["create-account"]["result"] == {"id": 7}
    assert steps["inner"]["parent"] == "outer"
    assert steps["nap"]["state"] == "waiting"
    assert [event["type"] for event in steps["create-account"]["events"]] == [
        "attempt_started",
        "attempt_succeeded",
    ]
    assert [event["type"] for event in history["events"]] == ["created", "started"]


def test_export__to_stdout_and_for_an_unknown_key(exported):
    with testing.registered(Signup):
        out = StringIO()
        call_command("workerflow", "export", "signup-1", stdout=out)
    assert json.loads(out.getvalue())["key"] == "signup-1"
    with pytest.raises(CommandError, match="No workflow instance has the key 'nope'"):
        call_command("workerflow", "export", "nope")


def test_replay__of_unchanged_code_returns_a_report_and_calls_nothing(exported):
    with testing.registered(Signup), CaptureQueriesContext(connection) as queries:
        report = testing.replay(exported)
    assert report.outcome == ReplayEnding.STOPPED
    assert report.steps_replayed == 3  # 'inner' is inside a settled run step
    assert report.unreached == ()
    assert CALLS == []
    assert [q["sql"] for q in queries.captured_queries if WRITE.match(q["sql"])] == []


def test_replay__of_changed_code_raises_naming_the_step(exported):
    class Changed(WorkflowDefinition, register=False):
        name = "signup"
        version = "3"

        def execute(self):
            self.run("create-account", lambda: None)
            self.wait("outer", "go")  # recorded as a run step

    with pytest.raises(NondeterminismError, match="reached step 'outer' as a wait"):
        testing.replay(json.loads(exported.read_text()), definition=Changed)
    with testing.registered(Changed), pytest.raises(NondeterminismError, match="'outer'"):
        testing.replay(str(exported))
    assert CALLS == []


def test_replay__a_renamed_step_breaks_unless_new_steps_are_allowed(exported):
    class Renamed(WorkflowDefinition, register=False):
        name = "signup"
        version = "3"

        def execute(self):
            self.run("create-user", lambda: CALLS.append("again"))

    with pytest.raises(NondeterminismError) as caught:
        testing.replay(exported, definition=Renamed)
    assert "new step 'create-user' where its history recorded 'create-account'" in str(caught.value)
    report = testing.replay(exported, definition=Renamed, allow_new_steps=True)
    # The steps recorded after the one it replaces are not judged: the tick goes on.
    assert report.unreached == ()
    assert report.first_new_step == "create-user"
    assert [problem.kind for problem in report.problems] == ["new_step"]
    assert CALLS == []


def test_replay__of_a_finished_history_completes(workerflow_harness, tmp_path):
    with testing.registered(Signup):
        instance = workerflow.start("signup", key="signup-2")
        workerflow_harness.drain()
        workerflow_harness.advance(3601)
        workerflow.send_event(instance.key, "confirmed", "yes")
        workerflow_harness.drain()
        out = StringIO()
        call_command("workerflow", "export", "signup-2", stdout=out)
        report = testing.replay(json.loads(out.getvalue()))
    assert report.outcome == ReplayEnding.COMPLETED
    assert report.steps_replayed == 4


def test_replay__refuses_a_history_it_cannot_read(exported, tmp_path):
    with pytest.raises(WorkflowInputError, match="Cannot read the history file"):
        testing.replay(tmp_path / "missing.json")
    history = json.loads(exported.read_text())
    with pytest.raises(WorkflowInputError, match="format 99"):
        testing.replay({**history, "format": 99})
    with pytest.raises(NondeterminismError, match="not registered"):
        testing.replay(history)  # 'signup' v3 is registered only inside testing.registered()
