"""Child workflows: self.child / start_child / wait_child, their errors and lifecycle."""

from __future__ import annotations

import pytest

import django_workerflow as workerflow
from django_workerflow import (
    WorkerflowError,
    WorkflowCancelledError,
    WorkflowFailedError,
    WorkflowVersionConflictError,
)
from django_workerflow.conf import settings
from django_workerflow.models import (
    Step,
    StepType,
    WorkflowEvent,
    WorkflowInstance,
    WorkflowStatus,
    step_events_of,
)
from django_workerflow.testing import WorkerDeath
from django_workerflow.values.control_flow import ExecutionStopped
from django_workerflow.values.states import StopReason
from tests.support.factories import WorkflowInstanceFactory
from tests.support.instances import claim, refreshed, take_over

pytestmark = pytest.mark.django_db


class WorkerDied(WorkerDeath):
    """Escapes the tick like a killed worker: nothing after it is recorded."""


@pytest.fixture
def shipment(define):
    """A child that waits for 'shipped' and returns its parcel and the event's payload."""

    def execute(self):
        tracking = self.wait("shipped", "shipped")
        return {"parcel": self.input["parcel"], "tracking": tracking}

    return define(execute, name="test-shipment")


@pytest.fixture
def quick(define):
    def execute(self):
        return self.run("double", lambda: self.input * 2)

    return define(execute, name="test-quick")


def test_child__starts_the_child_once_and_returns_its_result(define, shipment, workerflow_harness):
    calls = []

    def execute(self):
        shipped = self.child("ship", shipment, input={"parcel": 1})
        calls.append(1)
        return shipped

    order = workerflow.start(define(execute), key="order-7")
    workerflow_harness.drain()
    child = WorkflowInstance.objects.get(key="order-7/ship")
    assert (refreshed(order).status, child.parent_id, child.detached) == (
        "running",
        order.pk,
        False,
    )
    step = Step.objects.get(instance=order, step_id="ship")
    assert (step.type, step.state, step.child_instance_id) == (StepType.CHILD, "waiting", child.pk)

    workerflow.send_event(child.key, "shipped", "TRK-1")
    workerflow_harness.drain()
    assert refreshed(order).status == WorkflowStatus.COMPLETED
    assert order.result == {"parcel": 1, "tracking": "TRK-1"}
    assert calls == [1]
    assert WorkflowInstance.objects.filter(parent=order).count() == 1
    assert list(order.children.values_list("key", flat=True)) == ["order-7/ship"]


def test_child__accepts_a_registered_name_and_an_explicit_key(define, quick, workerflow_harness):
    def execute(self):
        return self.child("double", "test-quick", input=21, key="custom-key")

    parent = workerflow.start(define(execute))
    workerflow_harness.drain()
    assert refreshed(parent).result == 42
    assert WorkflowInstance.objects.get(key="custom-key").parent_id == parent.pk


def test_child__exactly_one_child_after_replays_and_a_crash(define, quick, workerflow_harness):
    deaths = []

    def execute(self):
        first = self.child("a", quick, input=1)
        if not deaths:
            deaths.append(1)
            raise WorkerDied()
        second = self.child("b", quick, input=2)
        self.sleep("nap", 5)
        return [first, second]

    parent = workerflow.start(define(execute), key="crashy")
    with pytest.raises(WorkerDied):
        workerflow_harness.drain()
    workerflow_harness.advance(settings.LEASE_SECONDS + 1)
    workerflow_harness.advance(10)
    assert refreshed(parent).result == [2, 4]
    assert WorkflowInstance.objects.filter(key="crashy/a").count() == 1
    assert WorkflowInstance.objects.filter(parent=parent).count() == 2
    assert Step.objects.filter(instance=parent, type=StepType.CHILD).count() == 2


def test_child__a_failed_child_fails_the_parent_once(define, workerflow_harness):
    def broken(self):
        self.run("carrier", _carrier_down, max_attempts=1)

    child_definition = define(broken)
    reached = []

    def execute(self):
        reached.append(1)
        return self.child("ship", child_definition)

    order = workerflow.start(define(execute), key="order-7")
    workerflow_harness.drain()
    assert refreshed(order).status == WorkflowStatus.FAILED
    assert order.error_name == "WorkflowFailedError"
    assert order.error_message == (
        "WorkflowFailedError: Child instance 'order-7/ship' failed: "
        "MaxAttemptsExceededError: Run step 'carrier' exhausted its configured attempts."
    )
    assert reached == [1, 1]  # the first pass, and the one the child's failure woke
    step = Step.objects.get(instance=order, step_id="ship")
    assert (step.state, step.error_name) == ("failed", "WorkflowFailedError")


def _carrier_down():
    raise RuntimeError("carrier down")


def test_child__a_caught_failure_carries_the_details_and_the_parent_goes_on(
    define, workerflow_harness
):
    def broken(self):
        raise RuntimeError("carrier down")

    child_definition = define(broken)
    seen = []

    def execute(self):
        try:
            self.child("ship", child_definition)
        except WorkflowFailedError as exc:
            seen.append(exc)
            return "refunded"

    order = workerflow.start(define(execute), key="order-7")
    workerflow_harness.drain()
    assert refreshed(order).result == "refunded"
    error = seen[-1]
    assert isinstance(error, WorkerflowError)
    assert not isinstance(error, WorkflowCancelledError)
    assert str(error) == "Child instance 'order-7/ship' failed: RuntimeError: carrier down"
    assert (error.key, error.status, error.error_name, error.error_message, error.reason) == (
        "order-7/ship",
        "failed",
        "RuntimeError",
        "RuntimeError: carrier down",
        None,
    )
    # Every replay raises the same error.
    assert len({str(exc) for exc in seen}) == 1


def test_child__a_cancelled_child_raises_workflow_cancelled_error(
    define, shipment, workerflow_harness
):
    seen = []

    def execute(self):
        try:
            self.child("ship", shipment, input={"parcel": 1})
        except WorkflowCancelledError as exc:
            seen.append(exc)
            return "cancelled"

    order = workerflow.start(define(execute), key="order-8")
    workerflow_harness.drain()
    workerflow.cancel("order-8/ship", reason="out of stock")
    workerflow_harness.drain()
    assert refreshed(order).result == "cancelled"
    error = seen[-1]
    assert isinstance(error, WorkflowFailedError)
    assert (error.status, error.reason) == ("cancelled", "out of stock")
    assert str(error) == "Child instance 'order-8/ship' was cancelled: out of stock"


def test_start_child__returns_the_key_and_wait_child_the_result(
    define, shipment, workerflow_harness
):
    def execute(self):
        key = self.start_child("ship", shipment, input={"parcel": 3})
        self.run("note", lambda: key)
        return self.wait_child("await-ship", key)

    order = workerflow.start(define(execute), key="order-9")
    workerflow_harness.drain()
    assert Step.objects.get(instance=order, step_id="ship").state == "succeeded"
    assert Step.objects.get(instance=order, step_id="note").result == "order-9/ship"
    workerflow.send_event("order-9/ship", "shipped", "T")
    workerflow_harness.drain()
    assert refreshed(order).result == {"parcel": 3, "tracking": "T"}


def test_wait_child__waits_for_any_instance(define, shipment, workerflow_harness):
    other = workerflow.start(shipment, key="standalone", input={"parcel": 5})

    def execute(self):
        return self.wait_child("await", "standalone")

    waiter = workerflow.start(define(execute))
    workerflow_harness.drain()
    assert refreshed(waiter).status == "running"
    workerflow.send_event(other, "shipped", "X")
    workerflow_harness.drain()
    assert refreshed(waiter).result == {"parcel": 5, "tracking": "X"}
    assert refreshed(other).parent_id is None


def test_child__a_version_conflict_fails_the_step(define, shipment, workerflow_harness):
    workerflow.start(shipment, key="taken", input={"parcel": 1})
    define(shipment.execute, name="test-shipment", version="2099")
    seen = []

    def execute(self):
        try:
            self.child("ship", "test-shipment", key="taken", version="2099")
        except WorkflowVersionConflictError as exc:
            seen.append(exc)
            return "conflict"

    parent = workerflow.start(define(execute))
    workerflow_harness.drain()
    assert refreshed(parent).result == "conflict"
    step = Step.objects.get(instance=parent, step_id="ship")
    assert (step.state, step.error_name) == ("failed", "WorkflowVersionConflictError")


def test_child__fan_out_of_fifty_children_inside_all(define, quick, workerflow_harness):
    def execute(self):
        return sum(
            self.all(*[lambda n=n: self.child(f"parcel-{n}", quick, input=n) for n in range(50)])
        )

    parent = workerflow.start(define(execute), key="fan")
    workerflow_harness.drain()
    assert refreshed(parent).result == 2 * sum(range(50))
    assert WorkflowInstance.objects.filter(parent=parent).count() == 50
    assert set(WorkflowInstance.objects.filter(parent=parent).values_list("status", flat=True)) == {
        "completed"
    }


def test_cancel__cascades_three_levels_down_with_the_reason(define, shipment, workerflow_harness):
    def middle(self):
        return self.child("leaf", shipment, input={"parcel": 1})

    middle_definition = define(middle)

    def top(self):
        return self.child("middle", middle_definition)

    def root(self):
        return self.child("top", define(top))

    root_definition = define(root)
    instance = workerflow.start(root_definition, key="r")
    workerflow_harness.drain()
    keys = ["r/top", "r/top/middle", "r/top/middle/leaf"]
    assert WorkflowInstance.objects.filter(key__in=keys, status="running").count() == 3

    workerflow.cancel(instance, reason="customer asked")
    cancelled = WorkflowEvent.objects.filter(type="cancelled").select_related("instance")
    reasons = {event.instance.key: event.reason for event in cancelled}
    assert reasons == {
        "r": "customer asked",
        "r/top": "parent cancelled: customer asked",
        "r/top/middle": "parent cancelled: customer asked",
        "r/top/middle/leaf": "parent cancelled: customer asked",
    }


def test_finish__a_parent_that_finishes_cancels_non_detached_children_only(
    define, shipment, workerflow_harness
):
    def execute(self):
        self.start_child("attached", shipment, input={"parcel": 1})
        self.start_child("detached", shipment, input={"parcel": 2}, detached=True)
        return "done"

    parent = workerflow.start(define(execute), key="p")
    workerflow_harness.drain()
    assert refreshed(parent).status == "completed"
    attached = WorkflowInstance.objects.get(key="p/attached")
    detached = WorkflowInstance.objects.get(key="p/detached")
    assert attached.status == "cancelled"
    assert attached.workflow_events.get(type="cancelled").reason == "parent finished"
    assert (detached.status, detached.detached, detached.parent_id) == ("running", True, parent.pk)


def test_pause__pausing_a_parent_pauses_no_child(define, shipment, workerflow_harness):
    def execute(self):
        return self.child("ship", shipment, input={"parcel": 1})

    parent = workerflow.start(define(execute), key="p")
    workerflow_harness.drain()
    workerflow.pause(parent)
    assert WorkflowInstance.objects.get(key="p/ship").status == "running"


def test_child__finishing_wakes_the_waiting_parent_in_the_same_transaction(
    define, shipment, workerflow_harness
):
    def execute(self):
        return self.child("ship", shipment, input={"parcel": 1})

    parent = workerflow.start(define(execute), key="p")
    workerflow_harness.drain()
    assert refreshed(parent).alarm_at is None
    workerflow.send_event("p/ship", "shipped", "T")
    from django_workerflow.runtime.tick import tick

    tick(WorkflowInstance.objects.get(key="p/ship").pk)
    woken = refreshed(parent)
    assert (woken.alarm_at, woken.wake_requested) == (workerflow_harness.now(), True)


def test_child__a_stale_worker_starts_no_child(quick):
    """The child and its step are written under the parent's lease: a worker whose lease
    was taken over creates neither."""
    parent = WorkflowInstanceFactory()
    stale = claim(parent)
    take_over(parent)
    with pytest.raises(ExecutionStopped) as stopped:
        stale.start_child_step(
            "ship",
            parent_step_id=None,
            workflow=quick,
            key="never",
            input=1,
            version=None,
            detached=False,
            waits=True,
        )
    assert stopped.value.reason == StopReason.LEASE_LOST
    assert not WorkflowInstance.objects.filter(key="never").exists()
    assert not Step.objects.filter(step_id="ship").exists()


def test_retry__a_parent_failed_by_its_child_waits_again_for_the_retried_child(
    define, workerflow_harness
):
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("carrier down")
        return "shipped"

    child_definition = define(lambda self: self.run("carrier", flaky, max_attempts=1))

    def execute(self):
        return self.child("ship", child_definition)

    order = workerflow.start(define(execute), key="order-r")
    workerflow_harness.drain()
    assert (refreshed(order).status, order.error_step_id) == ("failed", "ship")

    workerflow.retry(order)  # the child still failed: so does the parent, at once
    workerflow_harness.drain()
    assert refreshed(order).status == "failed"

    workerflow.retry("order-r/ship")
    workerflow.retry(order)
    workerflow_harness.drain()
    assert (refreshed(order).status, order.result) == ("completed", "shipped")
    assert WorkflowInstance.objects.filter(parent=order).count() == 1


def test_child__all_settled_collects_each_childs_outcome(define, quick, workerflow_harness):
    def broken(self):
        raise RuntimeError("no")

    broken_definition = define(broken)

    def execute(self):
        settled = self.all_settled(
            lambda: self.child("good", quick, input=4),
            lambda: self.child("bad", broken_definition),
        )
        return [[outcome.ok, outcome.value, type(outcome.error).__name__] for outcome in settled]

    parent = workerflow.start(define(execute), key="s")
    workerflow_harness.drain()
    assert refreshed(parent).result == [[True, 8, "NoneType"], [False, None, "WorkflowFailedError"]]


# Issue 20: recovering a fan-out, a refused start, and a parent whose child failed ----------


@pytest.fixture
def fan_out(define):
    """A parent whose ``all()`` awaits three children: 'done' completes, 'flaky' fails on
    its first run, 'slow' works, then waits for 'go'. Each child counts its work."""
    work = {"done": 0, "flaky": 0, "slow": 0, "slow-after": 0}
    broken = {"on": True}

    def count(name, value):
        def callback():
            work[name] += 1
            return value

        return callback

    def flaky_work():
        work["flaky"] += 1
        if broken["on"]:
            raise RuntimeError("carrier down")
        return "shipped"

    done = define(lambda self: self.run("work", count("done", "packed")), name="fan-done")
    flaky = define(lambda self: self.run("work", flaky_work, max_attempts=1), name="fan-flaky")

    def slow_execute(self):
        self.run("work", count("slow", None))
        self.wait("go", "go")
        return self.run("after", count("slow-after", "billed"))

    slow = define(slow_execute, name="fan-slow")

    def execute(self):
        return self.all(
            lambda: self.child("done", done),
            lambda: self.child("flaky", flaky),
            lambda: self.child("slow", slow),
        )

    parent = define(execute, name="fan-parent")
    return parent, work, broken


def _failed_fan_out(fan_out, harness):
    parent_definition, work, _ = fan_out
    parent = workerflow.start(parent_definition, key="fan")
    harness.drain()
    parent = refreshed(parent)
    assert (parent.status, parent.error_step_id) == ("failed", "flaky")
    slow = WorkflowInstance.objects.get(key="fan/slow")
    assert slow.status == "cancelled"
    assert slow.workflow_events.get(type="cancelled").reason == "parent finished"
    assert work == {"done": 1, "flaky": 1, "slow": 1, "slow-after": 0}
    return parent


def _finish_fan_out(parent, harness, work):
    harness.drain()
    assert refreshed(parent).status == "running"
    workerflow.send_event("fan/slow", "go")
    harness.drain()
    assert (refreshed(parent).status, parent.result) == (
        "completed",
        ["packed", "shipped", "billed"],
    )
    # No finished work ran again: 'done' once, 'slow' once before its wait.
    assert work == {"done": 1, "flaky": 2, "slow": 1, "slow-after": 1}
    assert WorkflowInstance.objects.filter(parent=parent).count() == 3


def test_retry__the_child_then_the_parent_completes_a_fan_out(fan_out, workerflow_harness):
    """Retrying the failed child, then the parent, takes back the cancellation of the
    sibling the failure cancelled: it goes on where it stopped (issue 20, item 5)."""
    parent = _failed_fan_out(fan_out, workerflow_harness)
    _, work, broken = fan_out
    broken["on"] = False

    workerflow.retry("fan/flaky")
    workerflow.retry(parent)

    slow = WorkflowInstance.objects.get(key="fan/slow")
    assert slow.status == "running"
    assert slow.workflow_events.last().reason == "taken back by the retry of 'fan'"
    _finish_fan_out(parent, workerflow_harness, work)


def test_retry__the_parent_with_its_children_completes_a_fan_out(fan_out, workerflow_harness):
    """One retry of the parent, ``with_children``, retries the failed child and takes back
    the cancelled one (issue 20, items 5 and 9)."""
    parent = _failed_fan_out(fan_out, workerflow_harness)
    _, work, broken = fan_out
    broken["on"] = False

    assert [child.key for child in workerflow.failed_children(parent)] == ["fan/flaky"]
    parent.retry(reason="carrier is back", with_children=True)

    flaky = WorkflowInstance.objects.get(key="fan/flaky")
    assert flaky.status == "running"
    assert flaky.workflow_events.last().reason == "retried with 'fan': carrier is back"
    _finish_fan_out(parent, workerflow_harness, work)


def test_retry__a_parent_alone_meets_its_failed_child_again_until_retried_with_it(
    fan_out, workerflow_harness
):
    parent = _failed_fan_out(fan_out, workerflow_harness)
    _, work, broken = fan_out
    broken["on"] = False

    workerflow.retry(parent)
    workerflow_harness.drain()
    assert (refreshed(parent).status, parent.error_step_id) == ("failed", "flaky")
    assert [child.key for child in workerflow.failed_children(parent)] == ["fan/flaky"]

    workerflow.retry(parent, with_children=True)
    _finish_fan_out(parent, workerflow_harness, work)


def test_retry__one_retry_with_children_recovers_an_all_whose_two_children_failed(
    define, workerflow_harness
):
    """Both failed branches of the ``all()`` reopen at once (issue 20, item 6)."""
    broken = {"on": True}
    calls = []

    def work():
        calls.append(1)
        if broken["on"]:
            raise RuntimeError("down")
        return "ok"

    child_definition = define(lambda self: self.run("work", work, max_attempts=1))

    def execute(self):
        return self.all(
            lambda: self.child("a", child_definition),
            lambda: self.child("b", child_definition),
        )

    parent = workerflow.start(define(execute), key="two")
    workerflow_harness.drain()
    parent = refreshed(parent)
    assert (parent.status, parent.error_step_id, parent.other_error_step_ids) == (
        "failed",
        "a",
        ["b"],
    )
    assert [child.key for child in workerflow.failed_children(parent)] == ["two/a", "two/b"]

    broken["on"] = False
    workerflow.retry(parent, with_children=True)
    workerflow_harness.drain()
    assert (refreshed(parent).status, parent.result) == ("completed", ["ok", "ok"])
    assert len(calls) == 4


def test_retry__a_grandchild_failure_is_named_and_retried_down_the_family(
    define, workerflow_harness
):
    broken = {"on": True}

    def leaf_work():
        if broken["on"]:
            raise RuntimeError("down")
        return "leaf"

    leaf = define(lambda self: self.run("work", leaf_work, max_attempts=1))
    middle = define(lambda self: self.child("leaf", leaf))
    top = workerflow.start(define(lambda self: self.child("middle", middle)), key="top")
    workerflow_harness.drain()
    assert refreshed(top).status == "failed"
    assert [child.key for child in workerflow.failed_children(top)] == [
        "top/middle",
        "top/middle/leaf",
    ]

    broken["on"] = False
    workerflow.retry(top, with_children=True)
    workerflow_harness.drain()
    assert (refreshed(top).status, top.result) == ("completed", "leaf")


def test_retry__a_refused_child_start_starts_the_child_once_it_is_deployed(
    define, workerflow_harness
):
    """A child whose definition was not deployed failed the parent; after the deploy, a
    retry starts it, in the same step (issue 20, item 7)."""

    def execute(self):
        return self.child("ship", "test-later-shipment", input=3)

    parent = workerflow.start(define(execute), key="later")
    workerflow_harness.drain()
    parent = refreshed(parent)
    assert (parent.status, parent.error_name, parent.error_step_id) == (
        "failed",
        "WorkflowNotRegisteredError",
        "ship",
    )

    define(lambda self: self.run("double", lambda: self.input * 2), name="test-later-shipment")
    workerflow.retry(parent)
    step = Step.objects.get(instance=parent, step_id="ship")
    assert (step.state, step.error_name) == ("pending", "")
    workerflow_harness.drain()

    assert (refreshed(parent).status, parent.result) == ("completed", 6)
    step = Step.objects.get(instance=parent, step_id="ship")
    assert step.child_instance == WorkflowInstance.objects.get(key="later/ship")
    # The whole history, derived events included (a child step has none).
    assert [event.type for event in step_events_of(parent, [step])] == [
        "child_waiting",
        "child_finished",
        "child_waiting",
        "child_finished",
    ]


def test_retry__a_wait_child_for_a_missing_key_looks_again(define, quick, workerflow_harness):
    def execute(self):
        return self.wait_child("await", "started-later")

    waiter = workerflow.start(define(execute), key="waiter")
    workerflow_harness.drain()
    assert (refreshed(waiter).status, waiter.error_step_id) == ("failed", "await")

    workerflow.start(quick, key="started-later", input=5)
    workerflow.retry(waiter)
    workerflow_harness.drain()
    assert (refreshed(waiter).status, waiter.result) == ("completed", 10)


def test_retry__does_not_take_back_a_cancellation_an_operator_made(
    define, shipment, workerflow_harness
):
    """Only the cancellations the parent's own failure made are taken back; a child an
    operator cancelled is named, and stays cancelled."""

    def execute(self):
        return self.child("ship", shipment, input={"parcel": 1})

    parent = workerflow.start(define(execute), key="op")
    workerflow_harness.drain()
    workerflow.cancel("op/ship", reason="out of stock")
    workerflow_harness.drain()
    assert (refreshed(parent).status, parent.error_name) == ("failed", "WorkflowCancelledError")
    assert [(c.key, c.status) for c in workerflow.failed_children(parent)] == [
        ("op/ship", "cancelled")
    ]

    workerflow.retry(parent, with_children=True)
    workerflow_harness.drain()
    assert refreshed(parent).status == "failed"
    assert WorkflowInstance.objects.get(key="op/ship").status == "cancelled"


def test_retry__takes_back_a_paused_child_as_paused(define, shipment, workerflow_harness):
    def broken(self):
        self.sleep("nap", 60)
        raise RuntimeError("no")

    broken_definition = define(broken)

    def execute(self):
        return self.all(
            lambda: self.child("ship", shipment, input={"parcel": 1}),
            lambda: self.child("bad", broken_definition),
        )

    parent = workerflow.start(define(execute), key="pp")
    workerflow_harness.drain()
    workerflow.pause("pp/ship")
    workerflow_harness.advance(61)
    assert refreshed(parent).status == "failed"
    assert WorkflowInstance.objects.get(key="pp/ship").status == "cancelled"

    workerflow.retry(parent)
    ship = WorkflowInstance.objects.get(key="pp/ship")
    assert (ship.status, ship.alarm_at) == ("paused", None)


def test_retry__takes_back_a_paused_child_as_paused_every_time(
    define, shipment, workerflow_harness
):
    """A paused child taken back paused, then cancelled again by its parent's next failure,
    goes back paused again: the status it had when cancelled, not 'running' because the
    last thing before that cancel was the take-back."""

    def broken(self):
        self.sleep("nap", 60)
        raise RuntimeError("no")

    broken_definition = define(broken)

    def execute(self):
        return self.all(
            lambda: self.child("ship", shipment, input={"parcel": 1}),
            lambda: self.child("bad", broken_definition),
        )

    parent = workerflow.start(define(execute), key="pp2")
    workerflow_harness.drain()
    workerflow.pause("pp2/ship")
    workerflow_harness.advance(61)
    workerflow.retry(parent)
    assert WorkflowInstance.objects.get(key="pp2/ship").status == "paused"
    workerflow_harness.drain()
    assert (refreshed(parent).status, parent.error_step_id) == ("failed", "bad")
    assert WorkflowInstance.objects.get(key="pp2/ship").status == "cancelled"

    workerflow.retry(parent)

    ship = WorkflowInstance.objects.get(key="pp2/ship")
    assert (ship.status, ship.alarm_at) == ("paused", None)
