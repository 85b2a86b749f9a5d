"""Forking an instance from a step onto another version: what is copied, what runs anew."""

from __future__ import annotations

from datetime import timedelta

import pytest

import django_workerflow as workerflow
from django_workerflow import WorkflowInputError, WorkflowNotRegisteredError
from django_workerflow.models import WorkflowEvent, WorkflowInstance
from tests.support.instances import OTHER_VERSION, VERSION, refreshed, step

pytestmark = pytest.mark.django_db


def _events(instance):
    return [
        (event.type, event.reason)
        for event in WorkflowEvent.objects.filter(instance=instance).order_by("id")
    ]


@pytest.fixture
def counted(define):
    """A definition of four steps (run, sleep, wait, run) that counts its callbacks, under
    one name at two versions; version two fixes the last step."""
    calls = {"reserve": 0, "charge": 0, "ship": 0}

    def count(name, value=None):
        def callback():
            calls[name] += 1
            return value if value is not None else name

        return callback

    def broken_ship():
        calls["ship"] += 1
        raise TypeError("list indices must be integers")

    def body(ship):
        def execute(self):
            reserved = self.run("reserve", count("reserve", {"sku": self.input["sku"]}))
            self.sleep("cool-off", timedelta(minutes=5))
            approval = self.wait("approval", "approved")
            charged = self.run("charge", count("charge"))
            return [reserved, approval, charged, self.run("ship", ship, max_attempts=1)]

        return execute

    name = "fork-order"
    define(body(broken_ship), name=name, version=VERSION)
    fixed = define(body(count("ship")), name=name, version=OTHER_VERSION)
    return calls, fixed


def _failed_source(harness):
    source = workerflow.start("fork-order", key="order-7", input={"sku": "A1"}, version=VERSION)
    harness.drain()
    harness.advance(timedelta(minutes=5))
    workerflow.send_event(source, "approved", {"by": "ops"})
    harness.drain()
    source = refreshed(source)
    assert source.status == "failed"
    return source


def test_fork__moves_a_failed_instance_onto_the_default_version_without_rerunning_settled_steps(
    workerflow_harness, counted
):
    calls, fixed = counted
    source = _failed_source(workerflow_harness)
    assert calls == {"reserve": 1, "charge": 1, "ship": 1}

    fork = workerflow.fork("order-7", reason="ship fixed in v2")
    workerflow_harness.drain()

    fork = refreshed(fork)
    assert fork.key == "order-7~1"
    assert fork.definition_version == OTHER_VERSION == fixed.version
    assert fork.input == {"sku": "A1"}
    assert fork.forked_from == source
    assert fork.status == "completed"
    assert fork.result == [{"sku": "A1"}, {"by": "ops"}, "charge", "ship"]
    assert calls == {"reserve": 1, "charge": 1, "ship": 2}
    assert refreshed(source).status == "failed"


def test_fork__runs_from_step_and_everything_after_it_anew(workerflow_harness, counted):
    calls, _ = counted
    _failed_source(workerflow_harness)

    fork = workerflow.fork("order-7", from_step="approval", version=OTHER_VERSION)
    workerflow_harness.drain()

    fork = refreshed(fork)
    assert [s.step_id for s in fork.steps.order_by("created_at", "id")] == [
        "reserve",
        "cool-off",
        "approval",
    ]
    assert step(fork, "approval").state == "waiting"
    assert fork.status == "running"
    workerflow.send_event(fork, "approved", {"by": "lead"})
    workerflow_harness.drain()
    fork = refreshed(fork)
    assert fork.status == "completed"
    assert fork.result[1] == {"by": "lead"}
    assert calls == {"reserve": 1, "charge": 2, "ship": 2}


def test_fork__records_forked_events_on_both_and_leaves_the_source_otherwise_unchanged(
    workerflow_harness, counted
):
    source = _failed_source(workerflow_harness)
    before = {f.attname: getattr(source, f.attname) for f in WorkflowInstance._meta.concrete_fields}
    source_steps = list(source.steps.values())

    fork = source.fork(from_step="charge", key="order-7-fixed", reason="ticket 12")

    source = refreshed(source)
    after = {f.attname: getattr(source, f.attname) for f in WorkflowInstance._meta.concrete_fields}
    assert after == before
    assert list(source.steps.values()) == source_steps
    assert _events(source)[-1] == ("forked", "forked to 'order-7-fixed': ticket 12")
    assert _events(fork) == [("forked", "forked from 'order-7': ticket 12")]
    assert list(source.forks.all()) == [fork]
    assert fork.status == "pending"
    assert fork.alarm_at == workerflow_harness.now()


def test_fork__numbers_default_keys_per_source(workerflow_harness, counted):
    _failed_source(workerflow_harness)
    WorkflowInstance.objects.create_pending(
        key="order-7~2",
        definition_name="fork-order",
        definition_version=VERSION,
        input=None,
        now=workerflow_harness.now(),
    )
    keys = [workerflow.fork("order-7").key for _ in range(3)]
    assert keys == ["order-7~1", "order-7~3", "order-7~4"]


def test_fork__takes_the_input_given(workerflow_harness, counted):
    _failed_source(workerflow_harness)
    fork = workerflow.fork("order-7", from_step="reserve", input={"sku": "B2"})
    workerflow_harness.drain()
    assert refreshed(fork).steps.get(step_id="reserve").result == {"sku": "B2"}
    none_fork = workerflow.fork("order-7", input=None)
    assert refreshed(none_fork).input is None


def test_fork__copies_nesting_and_reruns_the_steps_enclosing_from_step(workerflow_harness, define):
    calls = {"outer": 0, "first": 0, "second": 0, "done": 0}

    def counter(name):
        def callback():
            calls[name] += 1
            return name

        return callback

    def execute(self):
        def outer():
            calls["outer"] += 1
            return [self.run("first", counter("first")), self.run("second", counter("second"))]

        self.run("outer", outer)
        return self.run("done", counter("done"))

    definition = define(execute)
    source = workerflow.start(definition, key="nest")
    workerflow_harness.drain()
    assert refreshed(source).status == "completed"

    whole = workerflow.fork(source)
    assert [(s.step_id, s.parent and s.parent.step_id) for s in whole.steps.all()] == [
        ("outer", None),
        ("first", "outer"),
        ("second", "outer"),
        ("done", None),
    ]
    workerflow_harness.drain()
    assert calls == {"outer": 1, "first": 1, "second": 1, "done": 1}
    assert refreshed(whole).result == "done"

    from_second = workerflow.fork(source, from_step="second")
    assert [s.step_id for s in from_second.steps.all()] == []
    workerflow_harness.drain()
    assert calls == {"outer": 2, "first": 2, "second": 2, "done": 2}


def test_fork__refuses_an_unknown_from_step(workerflow_harness, counted):
    source = _failed_source(workerflow_harness)
    with pytest.raises(WorkflowInputError, match="has no step 'nope'"):
        workerflow.fork(source, from_step="nope")
    assert not WorkflowInstance.objects.filter(forked_from=source).exists()
    assert _events(source)[-1][0] == "failed"


def test_fork__refuses_an_unregistered_version_and_a_taken_key(workerflow_harness, counted):
    source = _failed_source(workerflow_harness)
    with pytest.raises(WorkflowNotRegisteredError):
        workerflow.fork(source, version="9999")
    with pytest.raises(WorkflowInputError, match="already exists"):
        workerflow.fork(source, key="order-7")
    assert WorkflowInstance.objects.count() == 1
    assert _events(source)[-1][0] == "failed"


def test_fork__refuses_a_default_key_longer_than_keys_may_be(workerflow_harness, define):
    long_key = "k" * 254
    source = workerflow.start(define(lambda self: 1), key=long_key)
    with pytest.raises(WorkflowInputError, match="Pass a shorter key"):
        workerflow.fork(source)
    assert workerflow.fork(source, key="short").key == "short"


# Issue 20: a fork keeps what the source decided and did (patch markers, children) ---------


def test_fork__keeps_the_sources_patched_answer(workerflow_harness, define):
    """A source that took the new branch of ``patched()`` forks into one that takes it too:
    the marker is copied with the steps (issue 20, item 3)."""
    fees = []

    def execute(self):
        if self.patched("fee-new"):
            self.run("fee-new", lambda: fees.append("new") or 7)
        else:
            self.run("fee-old", lambda: fees.append("old") or 5)
        self.wait("approval", "approved")
        return "done"

    source = workerflow.start(define(execute), key="fee")
    workerflow_harness.drain()
    assert fees == ["new"]

    fork = workerflow.fork(source)
    assert {s.step_id: s.type for s in fork.steps.all()} == {
        "patch:fee-new": "patch",
        "fee-new": "run",
    }
    workerflow_harness.drain()
    workerflow.send_event(fork, "approved")
    workerflow_harness.drain()

    fork = refreshed(fork)
    assert fork.status == "completed"
    assert fees == ["new"]
    assert not fork.steps.filter(step_id="fee-old").exists()
    assert step(fork, "patch:fee-new").result is True


def test_fork__keeps_a_completed_child_and_starts_no_second_one(workerflow_harness, define):
    """A child that completed in the source is not started again by the fork: its step is
    copied, linked to the same child (issue 20, item 4)."""
    charges = []
    card = define(lambda self: self.run("charge", lambda: charges.append(1) or "paid"))
    broken = {"on": True}

    def ship():
        if broken["on"]:
            raise RuntimeError("carrier down")
        return "shipped"

    def execute(self):
        paid = self.child("pay", card)
        return [paid, self.run("ship", ship, max_attempts=1)]

    source = workerflow.start(define(execute), key="order-c")
    workerflow_harness.drain()
    assert refreshed(source).status == "failed"
    assert charges == [1]
    child = WorkflowInstance.objects.get(key="order-c/pay")

    broken["on"] = False
    fork = workerflow.fork(source)
    assert step(fork, "pay").child_instance_id == child.pk
    workerflow_harness.drain()

    fork = refreshed(fork)
    assert (fork.status, fork.result) == ("completed", ["paid", "shipped"])
    assert charges == [1]
    assert not WorkflowInstance.objects.filter(key__startswith=f"{fork.key}/").exists()


def test_fork__keeps_a_start_child_whose_child_completed_and_restarts_a_cancelled_one(
    workerflow_harness, define
):
    """A ``start_child`` step is copied while its child completed, or is detached and still
    running (the fork's ``wait_child`` finds either); a child cancelled when the source
    failed is started anew, under the fork's key."""
    calls = []
    broken = {"on": True}
    quick = define(lambda self: self.run("work", lambda: calls.append(self.key) or self.key))
    slow = define(lambda self: self.wait("go", "go"))

    def execute(self):
        done = self.start_child("done", quick)
        pending = self.start_child("pending", slow)
        side = self.start_child("side", slow, detached=True)
        self.sleep("nap", 60)
        self.run("boom", lambda: broken["on"] and 1 / 0, max_attempts=1)
        return [self.wait_child(f"await-{key}", key) for key in (done, pending, side)]

    source = workerflow.start(define(execute), key="sc")
    workerflow_harness.advance(61)
    assert refreshed(source).status == "failed"
    assert WorkflowInstance.objects.get(key="sc/pending").status == "cancelled"
    assert WorkflowInstance.objects.get(key="sc/side").status == "running"

    broken["on"] = False
    fork = workerflow.fork(source, key="sc-fork")
    assert sorted(fork.steps.values_list("step_id", flat=True)) == ["done", "nap", "side"]
    workerflow_harness.drain()
    assert calls == ["sc/done"]
    assert WorkflowInstance.objects.get(key="sc-fork/pending").status == "running"
    assert not WorkflowInstance.objects.filter(key="sc-fork/side").exists()
    workerflow.send_event("sc-fork/pending", "go", "went")
    workerflow.send_event("sc/side", "go", "aside")
    workerflow_harness.drain()
    assert refreshed(fork).result == ["sc/done", "went", "aside"]


def test_fork__announces_no_status_change_of_its_source(
    workerflow_harness, counted, status_changes
):
    """The source's status does not change, so ``workflow_status_changed`` is not sent for
    it (issue 20, item 14)."""
    source = workerflow.start("fork-order", key="order-8", input={"sku": "A1"}, version=VERSION)
    workerflow_harness.drain()
    assert refreshed(source).status == "running"
    status_changes.changes.clear()

    fork = workerflow.fork(source)
    workerflow_harness.run_on_commit_callbacks()

    assert [change for change in status_changes.changes if change[0] == source.key] == []
    assert status_changes.statuses(fork)[:1] == ["pending"]
