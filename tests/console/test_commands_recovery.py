"""``manage.py workerflow retry``, ``fork``, ``wake`` and what ``show`` says about trouble:
tracebacks, unreached steps, a definition no worker has."""

from __future__ import annotations

from collections import Counter
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

import django_workerflow as workerflow
from django_workerflow.models import WorkflowEvent, WorkflowInstance, WorkflowStatus
from tests.support.commands import manage
from tests.support.factories import WorkflowInstanceFactory
from tests.support.instances import fail_every_attempt, get

pytestmark = pytest.mark.django_db

CALLS: Counter[str] = Counter()
BROKEN = {"charge": True}


def run(*args: str) -> str:
    out = StringIO()
    call_command("workerflow", *args, stdout=out)
    return out.getvalue()


def checkout_v1(self):
    self.run("reserve", lambda: CALLS.update(["reserve"]) or {"sku": "A-1"})

    def charge():
        CALLS["charge"] += 1
        if BROKEN["charge"]:
            lines = ["a"]
            return lines["total"]
        return {"charged": 42}

    return self.run("charge", charge, max_attempts=2)


def checkout_v2(self):
    self.run("reserve", lambda: CALLS.update(["reserve"]) or {"sku": "A-1"})
    return self.run("charge", lambda: CALLS.update(["charge-v2"]) or {"charged": 42})


@pytest.fixture
def failed(define, workerflow_harness):
    CALLS.clear()
    BROKEN["charge"] = True
    v1 = define(checkout_v1, name="checkout", version="1")
    define(checkout_v2, name="checkout", version="2")
    workerflow.start(v1, key="order-1")
    fail_every_attempt(workerflow_harness)
    assert get("order-1").status == WorkflowStatus.FAILED
    return get("order-1")


@pytest.fixture
def sleeping_in_a_nap(define, workerflow_harness):
    def execute(self):
        self.run("first", lambda: 1)
        self.sleep("nap", 3600)

    workerflow.start(define(execute, name="sleeper"), key="sleeping-1")
    workerflow_harness.drain()
    return get("sleeping-1")


# retry --------------------------------------------------------------------------------------


def test_retry__retries_a_failed_instance_with_the_reason(failed, workerflow_harness):
    BROKEN["charge"] = False

    out = run("retry", "order-1", "--reason", "fixed in 1.4.2")

    assert out == "Retried 'order-1'. Reason: fixed in 1.4.2\n"
    assert get("order-1").status == WorkflowStatus.RUNNING
    assert WorkflowEvent.objects.get(instance=failed, type="retried").reason == "fixed in 1.4.2"
    workerflow_harness.drain()
    assert get("order-1").status == WorkflowStatus.COMPLETED
    assert CALLS["reserve"] == 1


def test_retry__is_refused_for_an_instance_that_has_not_failed(sleeping_in_a_nap):
    with pytest.raises(CommandError, match=r"Skipped 'sleeping-1': it is running, not failed\."):
        run("retry", "sleeping-1")

    assert get("sleeping-1").status == WorkflowStatus.RUNNING


@pytest.fixture
def failed_parent(define, workerflow_harness):
    """'parcel' fails while ``BROKEN["ship"]``; its parent 'order-p' failed with it."""
    BROKEN["ship"] = True

    def ship():
        if BROKEN["ship"]:
            raise RuntimeError("carrier down")
        return "shipped"

    child = define(lambda self: self.run("ship", ship, max_attempts=1), name="parcel")
    workerflow.start(define(lambda self: self.child("ship", child), name="order"), key="order-p")
    workerflow_harness.drain()
    assert get("order-p").status == get("order-p/ship").status == WorkflowStatus.FAILED
    yield get("order-p")
    BROKEN.pop("ship")


def test_retry__names_the_failed_child_a_parent_meets_again(failed_parent, workerflow_harness):
    """Issue 20, item 9: the output says the parent fails again at once, and why."""
    BROKEN["ship"] = False

    out = run("retry", "order-p")

    assert out == (
        "Retried 'order-p'. It waits again for 'order-p/ship' (failed), so it fails again at "
        "once when it meets it. Retry 'order-p' with its failed children, or retry them "
        "first. No reason given.\n"
        "Run `workerflow retry order-p --with-children` to retry them with it.\n"
    )
    workerflow_harness.drain()
    assert get("order-p").status == WorkflowStatus.FAILED


def test_retry__with_children_retries_the_failed_child_too(failed_parent, workerflow_harness):
    BROKEN["ship"] = False

    out = run("retry", "order-p", "--with-children", "--reason", "carrier back")

    assert out == ("Retried 'order-p' with its failed child 'order-p/ship'. Reason: carrier back\n")
    assert get("order-p/ship").status == WorkflowStatus.RUNNING
    workerflow_harness.drain()
    assert (get("order-p").status, get("order-p").result) == ("completed", "shipped")


def test_retry__says_which_cancelled_children_go_on(define, workerflow_harness):
    """A sibling that the parent's failure cancelled goes on when the parent is retried
    with its failed child (issue 20, item 5)."""
    broken = {"on": True}

    def ship():
        if broken["on"]:
            raise RuntimeError("carrier down")
        return "shipped"

    shipping = define(lambda self: self.run("ship", ship, max_attempts=1), name="parcel")
    billing = define(lambda self: self.wait("billed", "billed"), name="bill")

    def execute(self):
        return self.all(lambda: self.child("ship", shipping), lambda: self.child("bill", billing))

    workerflow.start(define(execute, name="order"), key="order-f")
    workerflow_harness.drain()
    assert get("order-f/bill").status == WorkflowStatus.CANCELLED
    broken["on"] = False

    out = run("retry", "order-f", "--with-children")

    assert out == (
        "Retried 'order-f' with its failed child 'order-f/ship'. Its child 'order-f/bill', "
        "cancelled when it failed, goes on. No reason given.\n"
    )
    workerflow.send_event("order-f/bill", "billed", "paid")
    workerflow_harness.drain()
    assert (get("order-f").status, get("order-f").result) == ("completed", ["shipped", "paid"])


# fork ---------------------------------------------------------------------------------------


def test_fork__onto_the_default_version_from_a_step(failed, workerflow_harness):
    out = run("fork", "order-1", "--from-step", "charge", "--reason", "charge fixed in v2")

    assert out == (
        "Forked 'order-1' into 'order-1~1' (checkout v2), from step 'charge'. "
        "Reason: charge fixed in v2\n"
    )
    fork = get("order-1~1")
    assert fork.forked_from_id == failed.pk
    workerflow_harness.drain()
    assert get("order-1~1").status == WorkflowStatus.COMPLETED
    assert CALLS["reserve"] == 1
    assert CALLS["charge-v2"] == 1
    assert get("order-1").status == WorkflowStatus.FAILED


def test_fork__with_a_version_and_a_key(failed):
    out = run("fork", "order-1", "--version", "1", "--key", "order-1-again")

    assert "into 'order-1-again' (checkout v1), keeping every settled step" in out
    assert get("order-1-again").definition_version == "1"


def test_fork__an_unknown_step_is_refused(failed):
    with pytest.raises(CommandError, match="Could not fork 'order-1'"):
        run("fork", "order-1", "--from-step", "no-such-step")

    assert WorkflowInstance.objects.count() == 1


def test_fork__an_unregistered_version_is_refused(failed):
    with pytest.raises(CommandError, match="Could not fork 'order-1'"):
        run("fork", "order-1", "--version", "9")

    assert WorkflowInstance.objects.count() == 1


# wake ---------------------------------------------------------------------------------------


def test_wake__rings_a_pending_retry_now(define, workerflow_harness):
    attempts = Counter()

    def execute(self):
        def flaky():
            attempts["flaky"] += 1
            if attempts["flaky"] == 1:
                raise RuntimeError("first try fails")
            return "ok"

        return self.run("flaky", flaky, backoff=lambda attempt: 3600)

    workerflow.start(define(execute), key="retrying-1")
    workerflow_harness.drain()

    out = run("wake", "retrying-1")
    workerflow_harness.drain()

    assert out == "Woke 'retrying-1': the next attempt of step 'flaky' runs now.\n"
    assert get("retrying-1").status == WorkflowStatus.COMPLETED


def test_wake__says_a_sleep_is_never_skipped(sleeping_in_a_nap):
    out = run("wake", "sleeping-1")

    assert "keeps sleeping in step 'nap'" in out


def test_wake__is_refused_for_a_finished_instance(sleeping_in_a_nap):
    workerflow.cancel("sleeping-1")

    with pytest.raises(CommandError, match=r"Skipped 'sleeping-1': already cancelled\."):
        run("wake", "sleeping-1")


# show ---------------------------------------------------------------------------------------


def test_show__with_traceback_prints_the_instances_and_failed_attempts_tracebacks(failed):
    without = run("show", "order-1")
    out = run("show", "order-1", "--traceback")

    assert "Traceback" not in without
    assert "The workflow's failure:" in out
    assert "Attempt 2 of step 'charge':" in out
    assert "Attempt 1 of step 'charge':" in out
    assert "  Traceback (most recent call last):" in out
    assert 'return lines["total"]' in out
    assert "TypeError: list indices must be integers or slices, not str" in out


def test_show__a_finished_instance_says_how_it_ended_not_what_it_waits_on(failed):
    out = run("show", "order-1")

    assert "Waiting on" not in out
    assert "Ended: failed in step 'charge'" in out


def test_show__lists_unreached_steps_with_a_warning(define, workerflow_harness):
    shape = {"version": 1}

    def execute(self):
        self.run("a", lambda: 1)
        self.sleep("b" if shape["version"] == 1 else "c", 60)

    workerflow.start(define(execute), key="changing")
    workerflow_harness.drain()
    shape["version"] = 2
    WorkflowInstance.objects.filter(key="changing").update(alarm_at=workerflow_harness.now())
    workerflow_harness.drain()

    out = run("show", "changing")

    assert "Warning: 1 recorded step the current definition no longer reaches" in out
    assert "  unreached: b\n" in out


def test_show__warns_of_a_definition_no_worker_has(db):
    WorkflowInstanceFactory(key="orphan-1", definition_name="gone", definition_version="3")

    out = run("show", "orphan-1")
    listed = run("list")

    assert "Warning: no worker has workflow 'gone' version '3'." in out
    assert "Waiting on" not in out
    assert "no worker has workflow 'gone' version '3'" in listed


# The command line ---------------------------------------------------------------------------


@pytest.mark.slow  # seconds of real processes or real time: `make test-fast` leaves it out
def test_command_line__recovery_subcommands_exit_1_or_2_with_one_line(tmp_path):
    db_path = tmp_path / "cli.sqlite3"
    assert manage("migrate", "--verbosity", "0", db_path=db_path).returncode == 0

    results = [
        manage("workerflow", *args, db_path=db_path)
        for args in (("retry", "ghost"), ("fork", "ghost"), ("wake", "ghost"))
    ]
    no_key = manage("workerflow", "fork", db_path=db_path)
    bad_option = manage("workerflow", "retry", "ghost", "--frobnicate", db_path=db_path)

    for result in results:
        assert result.returncode == 1
        assert result.stderr == "CommandError: No workflow instance has the key 'ghost'.\n"
    for result in (no_key, bad_option):
        assert result.returncode == 2
        assert len(result.stderr.strip().splitlines()) == 1
        assert "Traceback" not in result.stderr
