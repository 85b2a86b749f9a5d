"""``self.patched(change_id)``: instances before, at and after the patched point each take
the right branch, once, and every replay gives the same answer."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

import django_workerflow as workerflow
from django_workerflow.models import Step, StepType, WorkflowInstance

pytestmark = pytest.mark.django_db

CHARGES: list[tuple[str, int]] = []
SHAPE = {"code": "old"}


def order(self):
    self.run("reserve", lambda: None)
    self.sleep("nap", 60)
    # "old": before the change; "patched": the deploy; "cleaned": the patch removed later.
    if SHAPE["code"] == "cleaned" or (SHAPE["code"] == "patched" and self.patched("new-fee")):
        self.run("charge-with-fee", lambda: CHARGES.append((self.key, 7)))
    else:
        self.run("charge", lambda: CHARGES.append((self.key, 5)))
    self.sleep("settle", 60)
    self.run("ship", lambda: None)
    return "shipped"


@pytest.fixture
def patch_deployed(define, workerflow_harness):
    """Old code: 'after' is past the charge; 'at' is asleep just before it. Then the patch
    is deployed and 'before' starts."""
    CHARGES.clear()
    SHAPE["code"] = "old"
    definition = define(order, name="order")
    workerflow.start(definition, key="after")
    workerflow_harness.drain()
    workerflow_harness.advance(61)  # 'after' charges the old fee, sleeps in 'settle'
    workerflow.start(definition, key="at")
    workerflow_harness.drain()  # 'at' sleeps in 'nap', before the patched call
    SHAPE["code"] = "patched"
    workerflow.start(definition, key="before")
    yield definition
    SHAPE["code"] = "old"


def markers(key: str) -> dict[str, object]:
    steps = Step.objects.filter(instance__key=key, type=StepType.PATCH)
    return dict(steps.values_list("step_id", "result"))


def test_patched__each_instance_takes_its_branch_once(patch_deployed, workerflow_harness):
    workerflow_harness.advance(61)
    workerflow_harness.advance(61)
    workerflow_harness.advance(61)
    statuses = dict(WorkflowInstance.objects.values_list("key", "status"))
    assert statuses == {"after": "completed", "at": "completed", "before": "completed"}
    assert sorted(CHARGES) == [("after", 5), ("at", 7), ("before", 7)]
    assert markers("before") == {"patch:new-fee": True}
    assert markers("at") == {"patch:new-fee": True}
    assert markers("after") == {"patch:new-fee": False}


def test_patched__the_recorded_answer_holds_on_every_replay(patch_deployed, workerflow_harness):
    workerflow_harness.drain()  # 'before' decides True, then sleeps in 'nap'
    assert markers("before") == {}
    workerflow_harness.advance(61)
    assert markers("before") == {"patch:new-fee": True}
    assert markers("after") == {"patch:new-fee": False}
    # Later replays (the 'settle' sleep) read the markers; none is written again.
    workerflow_harness.advance(61)
    workerflow_harness.advance(61)
    assert Step.objects.filter(type=StepType.PATCH).count() == 3
    assert len(CHARGES) == 3


def test_patched__old_instances_pass_check_replay_and_so_does_removing_the_patch(
    patch_deployed, workerflow_harness
):
    out = StringIO()
    call_command("workerflow", "check-replay", stdout=out)
    assert "0 would break, 0 with warnings" in out.getvalue()
    workerflow_harness.advance(61)
    workerflow_harness.advance(61)
    workerflow_harness.advance(61)
    # Every instance finished: the patch and the old branch can go. The markers left in
    # the histories are not reported as recorded steps no longer reached.
    assert WorkflowInstance.objects.filter(status="completed").count() == 3
    WorkflowInstance.objects.filter(key="before").update(status="running")
    SHAPE["code"] = "cleaned"
    out = StringIO()
    call_command("workerflow", "check-replay", "--key", "before", stdout=out)
    assert "0 would break, 0 with warnings" in out.getvalue()


def test_patched__asked_twice_in_one_execution_gives_one_answer(define, workerflow_harness):
    answers = []

    def twice(self):
        answers.append(self.patched("x"))
        self.sleep("nap", 60)
        answers.append(self.patched("x"))
        return answers[-1]

    instance = workerflow.start(define(twice), key="twice")
    workerflow_harness.drain()
    workerflow_harness.advance(61)
    instance.refresh_from_db()
    assert instance.status == "completed"
    assert answers == [True, True, True]
    assert markers("twice") == {"patch:x": True}


def test_patched__rejects_an_empty_change_id(define, workerflow_harness):
    def empty(self):
        return self.patched("")

    instance = workerflow.start(define(empty), key="empty")
    workerflow_harness.drain()
    instance.refresh_from_db()
    assert instance.status == "failed"
    assert "A patch change id must not be empty" in instance.error_message
