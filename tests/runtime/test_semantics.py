"""Replay semantics: the Python decisions of the core engine, through the public API."""

from __future__ import annotations

import json
from collections import Counter
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.db import connection, transaction

import django_workerflow as workerflow
from django_workerflow import (
    MaxAttemptsExceededError,
    NondeterminismError,
    NonRetryableStepError,
    SettledResult,
    WaitStepTimedOutError,
)
from django_workerflow.models import (
    InboundEvent,
    Step,
    StepEvent,
    WorkflowEvent,
    WorkflowInstance,
    WorkflowStatus,
    step_events_of,
)
from django_workerflow.signals import workflow_status_changed
from tests.support.bad_values import NOT_JSON, values
from tests.support.instances import refreshed

DUPLICATE_MESSAGE = (
    "Step id '{}' was already used earlier in this workflow execution. Steps must be "
    "uniquely identified within a single workflow execution."
)

# Read by `execute` in the nondeterminism tests; a test flips it between two ticks.
STEP_KIND = "run"


class CardDeclinedError(Exception):
    pass


def step(step_id: str) -> Step:
    return Step.objects.get(step_id=step_id)


def step_event_types(step_id: str) -> list[str]:
    step = Step.objects.get(step_id=step_id)
    return [event.type for event in step_events_of(step.instance_id, [step])]


def calls_to(counter: Counter, name: str, value=None):
    """A step callback that counts its calls in ``counter[name]`` and returns ``value``."""

    def callback():
        counter[name] += 1
        return value

    return callback


def failing(counter: Counter, name: str, exc: BaseException):
    def callback():
        counter[name] += 1
        raise exc

    return callback


# JSON round trip ----------------------------------------------------------------------


def test_run__result_keeps_key_order_on_first_run_and_on_replay(define, harness):
    seen = []

    def execute(self):
        value = self.run("build", lambda: {"b": 1, "a": 2, "nested": {"z": 1, "y": 2}})
        seen.append(value)
        self.sleep("nap", 5)
        return value

    instance = workerflow.start(define(execute))
    harness.drain()
    harness.advance(5)

    assert len(seen) == 2
    assert seen[0] == seen[1] == {"b": 1, "a": 2, "nested": {"z": 1, "y": 2}}
    assert [list(value) for value in seen] == [["b", "a", "nested"]] * 2
    assert [list(value["nested"]) for value in seen] == [["z", "y"]] * 2
    assert list(step("build").result) == ["b", "a", "nested"]
    assert list(refreshed(instance).result) == ["b", "a", "nested"]


def test_run__result_is_the_json_round_trip_on_first_run_as_on_replay(define, harness):
    seen = []

    def execute(self):
        value = self.run(
            "build",
            lambda: {"pair": (1, 2), 3: "three", "big": 2**70, "ratio": 0.1 + 0.2, "one": 1.0},
        )
        seen.append(value)
        self.sleep("nap", 5)
        return None

    workerflow.start(define(execute))
    harness.drain()
    harness.advance(5)

    expected = {"pair": [1, 2], "3": "three", "big": 2**70, "ratio": 0.1 + 0.2, "one": 1.0}
    assert seen == [expected, expected]
    for value in seen:
        assert type(value["pair"]) is list
        assert list(value) == ["pair", "3", "big", "ratio", "one"]
        assert type(value["one"]) is float
        assert type(value["big"]) is int


def test_run__tuple_result_becomes_a_list_on_the_first_run(define, harness):
    seen = []

    def execute(self):
        seen.append(self.run("pair", lambda: (1, "two")))

    workerflow.start(define(execute))
    harness.drain()

    assert seen == [[1, "two"]]
    assert type(seen[0]) is list


def test_input__keeps_key_order(define, harness):
    seen = []

    def execute(self):
        seen.append(list(self.input))
        self.sleep("nap", 1)

    instance = workerflow.start(define(execute), input={"z": 1, "a": 2, "m": 3})
    harness.drain()
    harness.advance(1)

    assert seen == [["z", "a", "m"]] * 2
    assert list(WorkflowInstance.objects.get(pk=instance.pk).input) == ["z", "a", "m"]


def test_wait__payload_keeps_key_order_on_first_run_and_on_replay(define, harness):
    seen = []

    def execute(self):
        seen.append(self.wait("answer", "answered"))
        self.sleep("nap", 1)

    instance = workerflow.start(define(execute))
    harness.drain()
    workerflow.send_event(instance, "answered", {"score": 9, "comment": "ok", "at": (1, 2)})
    harness.drain()
    harness.advance(1)

    assert seen == [{"score": 9, "comment": "ok", "at": [1, 2]}] * 2
    assert [list(payload) for payload in seen] == [["score", "comment", "at"]] * 2


def json_error(value) -> str:
    """What the JSON encoder says about ``value``."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        return str(exc)
    raise AssertionError(f"{value!r} is JSON-serializable")


@pytest.mark.parametrize("value", values(NOT_JSON))
def test_run__unserializable_result_fails_the_step_non_retryably(define, harness, value):
    calls = Counter()

    def execute(self):
        return self.run("bad", calls_to(calls, "bad", value), max_attempts=5)

    instance = workerflow.start(define(execute))
    harness.drain()
    harness.advance(60)

    message = (
        "NonRetryableStepError: Run step 'bad' returned a value that cannot be durably "
        f"serialized as JSON: {json_error(value)}"
    )
    bad = step("bad")
    assert calls["bad"] == 1
    assert bad.state == "failed"
    assert bad.attempt_count == 1
    assert bad.error_name == "NonRetryableStepError"
    assert bad.error_message == message
    instance = refreshed(instance)
    assert instance.status == WorkflowStatus.FAILED
    assert instance.error_name == "NonRetryableStepError"
    assert instance.error_message == message


# Retries ------------------------------------------------------------------------------


def failed_attempt_delays(step_id: str) -> list[float | None]:
    events = StepEvent.objects.filter(step__step_id=step_id, type="attempt_failed")
    return [
        None
        if event.next_attempt_at is None
        else (event.next_attempt_at - event.recorded_at).total_seconds()
        for event in events
    ]


def test_run__makes_three_attempts_by_default(define, harness):
    calls = Counter()

    def execute(self):
        return self.run("flaky", failing(calls, "flaky", ValueError("boom")))

    instance = workerflow.start(define(execute))
    harness.drain()
    harness.advance(0.25)
    harness.advance(0.5)
    harness.advance(3600)

    assert calls["flaky"] == 3
    flaky = step("flaky")
    assert (flaky.state, flaky.attempt_count, flaky.max_attempts) == ("failed", 3, 3)
    instance = refreshed(instance)
    assert instance.status == WorkflowStatus.FAILED
    assert instance.error_name == "MaxAttemptsExceededError"
    assert instance.error_message == (
        "MaxAttemptsExceededError: Run step 'flaky' exhausted its configured attempts."
    )


def test_run__default_backoff_doubles_from_250ms_and_caps_at_10s(define, harness):
    calls = Counter()

    def execute(self):
        return self.run("flaky", failing(calls, "flaky", ValueError("boom")), max_attempts=9)

    workerflow.start(define(execute))
    harness.drain()
    schedule = [0.25, 0.5, 1, 2, 4, 8, 10, 10]
    for attempt, delay in enumerate(schedule, start=1):
        assert calls["flaky"] == attempt
        # Not a moment before the retry is due...
        harness.advance(delay - 0.001)
        assert calls["flaky"] == attempt
        # ...and exactly when it is.
        harness.advance(0.001)

    assert calls["flaky"] == 9
    assert failed_attempt_delays("flaky") == [*schedule, None]


def test_run__custom_backoff_in_seconds(define, harness):
    calls = Counter()

    def execute(self):
        return self.run(
            "flaky",
            failing(calls, "flaky", ValueError("boom")),
            max_attempts=3,
            backoff=lambda attempt: attempt * 3,
        )

    workerflow.start(define(execute))
    harness.drain()
    harness.advance(2.999)
    assert calls["flaky"] == 1
    harness.advance(0.001)
    assert calls["flaky"] == 2
    harness.advance(6)

    assert calls["flaky"] == 3
    assert failed_attempt_delays("flaky") == [3, 6, None]


def test_run__custom_backoff_as_timedelta(define, harness):
    calls = Counter()

    def execute(self):
        return self.run(
            "flaky",
            failing(calls, "flaky", ValueError("boom")),
            max_attempts=2,
            backoff=lambda attempt: timedelta(minutes=attempt),
        )

    workerflow.start(define(execute))
    harness.drain()
    harness.advance(59)
    assert calls["flaky"] == 1
    harness.advance(1)

    assert calls["flaky"] == 2
    assert failed_attempt_delays("flaky") == [60, None]


def test_run__retry_that_succeeds_returns_its_value(define, harness):
    calls = Counter()

    def flaky():
        calls["flaky"] += 1
        if calls["flaky"] < 3:
            raise ConnectionError("try later")
        return "done"

    instance = workerflow.start(define(lambda self: self.run("flaky", flaky)))
    harness.drain()
    harness.advance(0.25)
    harness.advance(0.5)

    assert calls["flaky"] == 3
    assert refreshed(instance).result == "done"
    assert step_event_types("flaky") == [
        "attempt_started",
        "attempt_failed",
        "attempt_started",
        "attempt_failed",
        "attempt_started",
        "attempt_succeeded",
    ]


def test_run__error_message_is_class_name_and_message(define, harness):
    def execute(self):
        return self.run("charge", failing(Counter(), "charge", ValueError("card expired")))

    workerflow.start(define(execute))
    harness.drain()

    charge = step("charge")
    assert charge.error_name == "ValueError"
    assert charge.error_message == "ValueError: card expired"
    event = StepEvent.objects.get(step=charge, type="attempt_failed")
    assert (event.error_name, event.error_message) == ("ValueError", "ValueError: card expired")


def test_run__error_message_is_the_class_name_alone_for_an_empty_message(define, harness):
    def execute(self):
        return self.run("charge", failing(Counter(), "charge", CardDeclinedError()))

    workerflow.start(define(execute))
    harness.drain()

    charge = step("charge")
    assert charge.error_name == "CardDeclinedError"
    assert charge.error_message == "CardDeclinedError"


def test_execute__uncaught_error_fails_the_instance_with_its_name_and_message(define, harness):
    def execute(self):
        raise LookupError("no such customer")

    instance = refreshed(workerflow.start(define(execute)))
    harness.drain()

    instance = refreshed(instance)
    assert instance.status == WorkflowStatus.FAILED
    assert instance.error_name == "LookupError"
    assert instance.error_message == "LookupError: no such customer"
    assert instance.finished_at == harness.now()


def test_run__non_retryable_error_fails_at_once(define, harness):
    calls = Counter()

    def execute(self):
        return self.run(
            "charge", failing(calls, "charge", NonRetryableStepError("fraud")), max_attempts=5
        )

    instance = workerflow.start(define(execute))
    harness.drain()
    harness.advance(3600)

    assert calls["charge"] == 1
    assert step("charge").error_message == "NonRetryableStepError: fraud"
    assert refreshed(instance).error_message == "NonRetryableStepError: fraud"


# Suspension cannot be swallowed ---------------------------------------------------------


def test_sleep__suspension_is_not_caught_by_except_exception(define, harness):
    reached_end = Counter()

    def execute(self):
        try:  # noqa: SIM105 - user code written this way is the point
            self.sleep("nap", 10)
        except Exception:
            pass
        reached_end["end"] += 1
        return "woke"

    instance = workerflow.start(define(execute))
    harness.drain()

    assert reached_end["end"] == 0
    assert refreshed(instance).status == WorkflowStatus.RUNNING
    harness.advance(10)
    assert reached_end["end"] == 1
    assert refreshed(instance).result == "woke"


def test_wait__is_never_completed_while_user_code_swallows_the_suspension(define, harness):
    def execute(self):
        try:  # noqa: SIM105 - user code written this way is the point
            self.wait("answer", "answered")
        except BaseException:
            pass
        return "finished"

    instance = workerflow.start(define(execute))
    harness.drain()

    instance = refreshed(instance)
    assert instance.status == WorkflowStatus.RUNNING
    assert instance.result is None
    assert step("answer").state == "waiting"
    workerflow.send_event(instance, "answered", 1)
    harness.drain()
    assert refreshed(instance).status == WorkflowStatus.COMPLETED


def test_run__pending_retry_is_not_caught_by_except_exception(define, harness):
    calls = Counter()

    def flaky():
        calls["flaky"] += 1
        if calls["flaky"] == 1:
            raise ValueError("first time")
        return "second time"

    def execute(self):
        try:
            return self.run("flaky", flaky)
        except Exception:
            return "swallowed"

    instance = workerflow.start(define(execute))
    harness.drain()
    assert refreshed(instance).status == WorkflowStatus.RUNNING
    harness.advance(0.25)

    assert refreshed(instance).result == "second time"


# all / all_settled ---------------------------------------------------------------------


def test_all__returns_results_in_branch_order(define, harness):
    def execute(self):
        def slow():
            self.sleep("slow-nap", 10)
            return self.run("slow", lambda: "slow")

        return self.all(slow, lambda: self.run("fast", lambda: "fast"), lambda: 3)

    instance = workerflow.start(define(execute))
    harness.drain()
    assert step("fast").state == "succeeded"
    harness.advance(10)

    assert refreshed(instance).result == ["slow", "fast", 3]
    assert step("fast").created_at < step("slow").created_at


def test_all__lets_every_branch_progress_in_the_same_tick(define, harness):
    calls = Counter()
    flaky_attempts = Counter()

    def flaky():
        flaky_attempts["flaky"] += 1
        if flaky_attempts["flaky"] == 1:
            raise ValueError("once")
        return "flaky"

    def execute(self):
        return self.all(
            lambda: self.wait("answer", "answered"),
            lambda: self.run("flaky", flaky),
            lambda: self.run("plain", calls_to(calls, "plain", "plain")),
        )

    instance = workerflow.start(define(execute))

    assert harness.drain() == 1
    assert calls["plain"] == 1
    assert flaky_attempts["flaky"] == 1
    assert step("answer").state == "waiting"
    assert refreshed(instance).status == WorkflowStatus.RUNNING

    harness.advance(0.25)
    assert flaky_attempts["flaky"] == 2
    assert refreshed(instance).status == WorkflowStatus.RUNNING

    workerflow.send_event(instance, "answered", "yes")
    harness.drain()
    assert refreshed(instance).result == ["yes", "flaky", "plain"]
    assert calls["plain"] == 1


def test_all__raises_the_first_failure_in_branch_order(define, harness):
    calls = Counter()

    def execute(self):
        try:
            self.all(
                lambda: self.run("one", failing(calls, "one", NonRetryableStepError("one"))),
                lambda: self.run("two", failing(calls, "two", NonRetryableStepError("two"))),
            )
        except NonRetryableStepError as exc:
            return str(exc)

    instance = workerflow.start(define(execute))
    harness.drain()

    assert refreshed(instance).result == "one"
    assert calls == {"one": 1, "two": 1}


def test_all__raises_a_failure_even_while_another_branch_waits(define, harness):
    def execute(self):
        self.all(
            lambda: self.wait("answer", "answered"),
            lambda: self.run("charge", failing(Counter(), "c", NonRetryableStepError("no"))),
        )

    instance = workerflow.start(define(execute))
    harness.drain()

    instance = refreshed(instance)
    assert instance.status == WorkflowStatus.FAILED
    assert instance.error_message == "NonRetryableStepError: no"


def test_all__suspends_while_any_branch_waits(define, harness):
    def execute(self):
        return self.all(lambda: self.run("a", lambda: "a"), lambda: self.wait("b", "b"))

    instance = workerflow.start(define(execute))
    harness.drain()
    harness.advance(3600)
    assert refreshed(instance).status == WorkflowStatus.RUNNING

    workerflow.send_event(instance, "b", "b")
    harness.drain()
    assert refreshed(instance).result == ["a", "b"]


def test_all_settled__returns_ok_value_and_error_per_branch(define, harness):
    seen = []

    def execute(self):
        results = self.all_settled(
            lambda: self.run("good", lambda: {"v": 1}),
            lambda: self.run("bad", failing(Counter(), "bad", NonRetryableStepError("nope"))),
        )
        seen.append(results)
        return [
            [r.ok, r.value, type(r.error).__name__ if r.error else None, str(r.error or "")]
            for r in results
        ]

    instance = workerflow.start(define(execute))
    harness.drain()

    good, bad = seen[0]
    assert good == SettledResult(ok=True, value={"v": 1}, error=None)
    assert bad.ok is False
    assert bad.value is None
    assert isinstance(bad.error, NonRetryableStepError)
    assert refreshed(instance).result == [
        [True, {"v": 1}, None, ""],
        [False, None, "NonRetryableStepError", "nope"],
    ]


def test_all_settled__waits_until_every_branch_has_settled(define, harness):
    calls = Counter()

    def execute(self):
        results = self.all_settled(
            lambda: self.run("bad", failing(calls, "bad", NonRetryableStepError("nope"))),
            lambda: self.wait("answer", "answered"),
        )
        return [[r.ok, r.value, str(r.error) if r.error else None] for r in results]

    instance = workerflow.start(define(execute))
    harness.drain()
    harness.advance(3600)
    assert refreshed(instance).status == WorkflowStatus.RUNNING
    assert calls["bad"] == 1

    workerflow.send_event(instance, "answered", 42)
    harness.drain()

    assert refreshed(instance).result == [[False, None, "nope"], [True, 42, None]]
    assert calls["bad"] == 1


# wait ----------------------------------------------------------------------------------


def test_wait__uncaught_timeout_fails_the_workflow(define, harness):
    instance = workerflow.start(define(lambda self: self.wait("answer", "answered", timeout=60)))
    harness.drain()
    harness.advance(59.999)
    assert refreshed(instance).status == WorkflowStatus.RUNNING

    harness.advance(0.001)

    instance = refreshed(instance)
    assert instance.status == WorkflowStatus.FAILED
    assert instance.error_name == "WaitStepTimedOutError"
    assert "'answer'" in instance.error_message
    assert step("answer").state == "timed_out"


def test_wait__caught_timeout_continues_identically_on_replay(define, harness):
    paths = []
    calls = Counter()

    def execute(self):
        try:
            answer = self.wait("answer", "answered", timeout=timedelta(days=7))
            paths.append("answered")
        except WaitStepTimedOutError:
            answer = self.run("default", calls_to(calls, "default", "no answer"))
            paths.append("timed out")
        self.sleep("nap", 60)
        return answer

    instance = workerflow.start(define(execute))
    harness.drain()
    harness.advance(timedelta(days=7))
    harness.advance(60)

    assert refreshed(instance).result == "no answer"
    assert paths == ["timed out", "timed out"]
    assert calls["default"] == 1


def test_wait__events_sent_before_it_exists_are_claimed_first_in_first_out(define, harness):
    def execute(self):
        self.sleep("nap", 10)
        return [self.wait("first", "item"), self.wait("second", "item")]

    instance = workerflow.start(define(execute))
    harness.drain()
    one = workerflow.send_event(instance, "item", {"n": 1})
    two = workerflow.send_event(instance, "item", {"n": 2})
    # Same virtual instant: the tie is broken by insertion order.
    assert one.created_at == two.created_at
    assert InboundEvent.objects.filter(claimed_at__isnull=True).count() == 2

    harness.advance(10)

    assert refreshed(instance).result == [{"n": 1}, {"n": 2}]
    one.refresh_from_db()
    two.refresh_from_db()
    assert one.claimed_by == step("first")
    assert two.claimed_by == step("second")


def test_wait__many_events_at_the_same_instant_are_claimed_in_insertion_order(define, harness):
    count = 12

    def execute(self):
        self.sleep("nap", 1)
        return [self.wait(f"w{n}", "item") for n in range(count)]

    instance = workerflow.start(define(execute))
    harness.drain()
    for n in range(count):
        workerflow.send_event(instance, "item", n)
    harness.advance(1)

    assert refreshed(instance).result == list(range(count))


def test_wait__event_received_after_its_deadline_is_not_used_and_stays_queued(define, harness):
    def execute(self):
        try:
            return self.wait("answer", "answered", timeout=10)
        except WaitStepTimedOutError:
            return "timed out"

    instance = workerflow.start(define(execute))
    harness.drain()
    harness.clock.advance(timedelta(seconds=11))  # the deadline passes before any tick

    late = workerflow.send_event(instance, "answered", "too late")
    assert late.claimed_by is None
    harness.drain()

    assert refreshed(instance).result == "timed out"
    late.refresh_from_db()
    assert late.claimed_by is None
    assert late.claimed_at is None


def test_wait__queued_event_sent_after_its_deadline_is_not_claimed_later(define, harness):
    deadline = harness.now() + timedelta(seconds=5)

    def execute(self):
        self.sleep("nap", 10)
        try:
            return self.wait("answer", "answered", timeout_at=deadline)
        except WaitStepTimedOutError:
            return "timed out"

    instance = workerflow.start(define(execute))
    harness.drain()
    harness.advance(7)
    late = workerflow.send_event(instance, "answered", "after the deadline")
    harness.advance(3)

    assert refreshed(instance).result == "timed out"
    late.refresh_from_db()
    assert late.claimed_by is None


def test_wait__queued_event_sent_before_its_deadline_is_claimed_later(define, harness):
    deadline = harness.now() + timedelta(seconds=5)

    def execute(self):
        self.sleep("nap", 10)
        return self.wait("answer", "answered", timeout_at=deadline)

    instance = workerflow.start(define(execute))
    harness.drain()
    harness.advance(4)
    workerflow.send_event(instance, "answered", "in time")
    harness.advance(6)

    assert refreshed(instance).result == "in time"


def test_wait__paused_instance_only_queues_events(define, harness):
    instance = workerflow.start(define(lambda self: self.wait("answer", "answered")))
    harness.drain()
    instance.pause()

    event = workerflow.send_event(instance, "answered", "while paused")
    harness.advance(60)

    assert event.claimed_by is None
    assert step("answer").state == "waiting"
    assert refreshed(instance).status == WorkflowStatus.PAUSED

    instance.resume()
    harness.drain()
    assert refreshed(instance).result == "while paused"
    event.refresh_from_db()
    assert event.claimed_by == step("answer")


@pytest.mark.parametrize("how", ["completed", "cancelled", "failed"])
def test_send_event__to_a_terminal_instance_returns_none_and_writes_nothing(define, harness, how):
    def execute(self):
        if how == "failed":
            raise RuntimeError("broken")
        return "done"

    instance = workerflow.start(define(execute))
    if how == "cancelled":
        instance.cancel()
    harness.drain()
    assert refreshed(instance).status == how
    updated_at = instance.updated_at

    assert workerflow.send_event(instance, "answered", {"late": True}) is None
    assert workerflow.send_event(instance.key, "answered") is None

    assert InboundEvent.objects.count() == 0
    assert refreshed(instance).updated_at == updated_at


def test_send_event__satisfies_the_earliest_waiting_step_of_that_name(define, harness):
    def execute(self):
        return self.all(lambda: self.wait("first", "item"), lambda: self.wait("second", "item"))

    instance = workerflow.start(define(execute))
    harness.drain()
    workerflow.send_event(instance, "item", "a")
    assert (step("first").state, step("second").state) == ("satisfied", "waiting")
    workerflow.send_event(instance, "item", "b")
    harness.drain()

    assert refreshed(instance).result == ["a", "b"]


# atomic=True ---------------------------------------------------------------------------


def test_run_atomic__callback_writes_commit_with_the_step_result(define, harness):
    def execute(self):
        return self.run("group", lambda: Group.objects.create(name="staff").pk, atomic=True)

    instance = workerflow.start(define(execute))
    harness.drain()

    assert refreshed(instance).result == Group.objects.get(name="staff").pk
    assert step("group").state == "succeeded"


def test_run_atomic__callback_writes_roll_back_when_it_raises(define, harness):
    calls = Counter()

    def create_then_fail():
        calls["attempts"] += 1
        Group.objects.create(name="staff")
        raise ValueError("after the write")

    def execute(self):
        return self.run("group", create_then_fail, atomic=True)

    instance = workerflow.start(define(execute))
    harness.drain()
    harness.advance(0.25)
    harness.advance(0.5)

    # Each attempt re-created the unique name: it would raise IntegrityError had one stayed.
    assert calls["attempts"] == 3
    assert Group.objects.count() == 0
    assert refreshed(instance).error_name == "MaxAttemptsExceededError"
    assert (
        list(StepEvent.objects.filter(type="attempt_failed").values_list("error_message"))
        == [("ValueError: after the write",)] * 3
    )


def test_run_atomic__writes_roll_back_when_the_result_cannot_be_serialized(define, harness):
    def create_then_return_object():
        Group.objects.create(name="staff")
        return object()

    instance = workerflow.start(
        define(lambda self: self.run("group", create_then_return_object, atomic=True))
    )
    harness.drain()

    assert Group.objects.count() == 0
    assert refreshed(instance).error_name == "NonRetryableStepError"


def test_run_non_atomic__writes_stay_when_the_callback_then_fails(define, harness):
    def create_then_fail():
        Group.objects.create(name="staff")
        raise NonRetryableStepError("after the write")

    instance = workerflow.start(define(lambda self: self.run("group", create_then_fail)))
    harness.drain()

    assert Group.objects.filter(name="staff").exists()
    assert refreshed(instance).status == WorkflowStatus.FAILED


@pytest.mark.django_db(transaction=True)
def test_run_atomic__callback_runs_inside_a_transaction_and_plain_run_does_not(define, harness):
    seen = {}

    def execute(self):
        self.run("atomic", lambda: seen.update(atomic=connection.in_atomic_block), atomic=True)
        self.run("plain", lambda: seen.update(plain=connection.in_atomic_block))

    workerflow.start(define(execute))
    harness.drain()

    assert seen == {"atomic": True, "plain": False}


# Recorded failures replay -------------------------------------------------------------


def test_run__non_retryable_failure_replays_as_the_same_error(define, harness):
    calls = Counter()
    caught = []

    def execute(self):
        try:
            self.run("charge", failing(calls, "charge", NonRetryableStepError("card declined")))
        except NonRetryableStepError as exc:
            caught.append((type(exc), str(exc)))
            self.sleep("nap", 5)
            return "refunded"

    instance = workerflow.start(define(execute))
    harness.drain()
    harness.advance(5)

    assert refreshed(instance).result == "refunded"
    assert caught == [(NonRetryableStepError, "card declined")] * 2
    assert calls["charge"] == 1


def test_run__exhausted_failure_replays_as_max_attempts_exceeded(define, harness):
    calls = Counter()
    caught = []

    def execute(self):
        try:
            self.run("charge", failing(calls, "charge", ValueError("timeout")), max_attempts=2)
        except MaxAttemptsExceededError as exc:
            caught.append(str(exc))
            self.sleep("nap", 5)
            return "gave up"

    instance = workerflow.start(define(execute))
    harness.drain()
    harness.advance(0.25)
    harness.advance(5)

    assert refreshed(instance).result == "gave up"
    assert caught == ["Run step 'charge' exhausted its configured attempts."] * 2
    assert calls["charge"] == 2


def test_run__unserializable_failure_replays_with_the_recorded_message(define, harness):
    caught = []

    def execute(self):
        try:
            self.run("bad", lambda: {1, 2})
        except NonRetryableStepError as exc:
            caught.append(str(exc))
            self.sleep("nap", 5)

    workerflow.start(define(execute))
    harness.drain()
    harness.advance(5)

    message = (
        "Run step 'bad' returned a value that cannot be durably serialized as JSON: "
        "Object of type set is not JSON serializable"
    )
    assert caught == [message, message]


# Broken definitions --------------------------------------------------------------------


def test_step_id__reused_by_run_steps_fails_the_workflow(define, harness):
    instance = workerflow.start(
        define(lambda self: [self.run("dup", lambda: 1), self.run("dup", lambda: 2)])
    )
    harness.drain()

    instance = refreshed(instance)
    assert instance.status == WorkflowStatus.FAILED
    assert instance.error_name == "DuplicateStepIdError"
    assert instance.error_message == "DuplicateStepIdError: " + DUPLICATE_MESSAGE.format("dup")


@pytest.mark.parametrize(
    "second_use",
    [
        pytest.param(lambda self: self.sleep("dup", 1), id="sleep"),
        pytest.param(lambda self: self.wait("dup", "evt"), id="wait"),
        pytest.param(lambda self: self.sleep_until("dup", self.now()), id="sleep_until"),
    ],
)
def test_step_id__reused_across_kinds_fails_the_workflow(define, harness, second_use):
    def execute(self):
        self.run("dup", lambda: 1)
        second_use(self)

    instance = workerflow.start(define(execute))
    harness.drain()

    assert refreshed(instance).error_message == "DuplicateStepIdError: " + DUPLICATE_MESSAGE.format(
        "dup"
    )


def test_step_id__reuse_fails_the_workflow_even_when_user_code_catches_it(define, harness):
    calls = Counter()

    def execute(self):
        self.run("dup", calls_to(calls, "first"))
        try:  # noqa: SIM105 - user code written this way is the point
            self.run("dup", calls_to(calls, "second"))
        except Exception:
            pass
        self.run("after", calls_to(calls, "after"))
        return "completed anyway"

    instance = workerflow.start(define(execute))
    harness.drain()

    instance = refreshed(instance)
    assert instance.status == WorkflowStatus.FAILED
    assert instance.error_message == "DuplicateStepIdError: " + DUPLICATE_MESSAGE.format("dup")
    assert calls == {"first": 1}
    assert not Step.objects.filter(step_id="after").exists()


def test_step_id__reuse_inside_all_branches_fails_the_workflow(define, harness):
    def execute(self):
        return self.all_settled(
            lambda: self.run("dup", lambda: 1), lambda: self.run("dup", lambda: 2)
        )

    instance = workerflow.start(define(execute))
    harness.drain()

    assert refreshed(instance).error_name == "DuplicateStepIdError"


def nondeterministic(self):
    if STEP_KIND == "run":
        self.run("shape", lambda: "ran")
    else:
        try:  # noqa: SIM105 - user code written this way is the point
            self.wait("shape", "evt")
        except Exception:
            pass
    self.sleep("nap", 5)
    return "done"


def test_replay__recorded_step_reached_as_another_kind_fails_with_nondeterminism(
    define, harness, monkeypatch
):
    instance = workerflow.start(define(nondeterministic))
    harness.drain()
    assert step("shape").type == "run"

    monkeypatch.setattr(f"{__name__}.STEP_KIND", "wait")
    harness.advance(5)

    instance = refreshed(instance)
    assert instance.status == WorkflowStatus.FAILED
    assert instance.error_name == NondeterminismError.__name__
    assert "'shape'" in instance.error_message
    assert "wait" in instance.error_message
    assert "run" in instance.error_message
    assert step("nap").state == "waiting"


def test_replay__recorded_sleep_reached_as_a_run_fails_with_nondeterminism(
    define, harness, monkeypatch
):
    monkeypatch.setattr(f"{__name__}.STEP_KIND", "sleep")

    def execute(self):
        if STEP_KIND == "sleep":
            self.sleep("shape", 5)
        else:
            self.run("shape", lambda: 1)

    instance = workerflow.start(define(execute))
    harness.drain()
    monkeypatch.setattr(f"{__name__}.STEP_KIND", "run")
    harness.advance(5)

    instance = refreshed(instance)
    assert instance.error_name == "NondeterminismError"
    assert "'shape'" in instance.error_message


def test_step_id__of_200_characters_is_accepted(define, harness):
    instance = workerflow.start(define(lambda self: self.run("s" * 200, lambda: "ok")))
    harness.drain()

    assert refreshed(instance).result == "ok"


# Pause and cancel at step boundaries ---------------------------------------------------


def test_pause__from_inside_a_step_stops_before_the_next_step(define, harness):
    calls = Counter()

    def execute(self):
        def first():
            calls["first"] += 1
            workerflow.pause(self.key)
            return "first"

        return [self.run("first", first), self.run("second", calls_to(calls, "second", "2nd"))]

    instance = workerflow.start(define(execute))
    harness.drain()
    harness.advance(3600)

    instance = refreshed(instance)
    assert instance.status == WorkflowStatus.PAUSED
    assert instance.alarm_at is None
    assert step("first").state == "succeeded"
    assert not Step.objects.filter(step_id="second").exists()
    assert calls == {"first": 1}

    instance.resume()
    harness.drain()

    assert refreshed(instance).result == ["first", "2nd"]
    assert calls == {"first": 1, "second": 1}
    assert list(instance.workflow_events.values_list("type", flat=True)) == [
        "created",
        "started",
        "paused",
        "resumed",
        "completed",
    ]


def test_pause__between_ticks_holds_a_due_sleep_until_resumed(define, harness):
    calls = Counter()

    def execute(self):
        self.sleep("nap", 10)
        return self.run("after", calls_to(calls, "after", "done"))

    instance = workerflow.start(define(execute))
    harness.drain()
    instance.pause()
    harness.advance(60)
    assert calls["after"] == 0
    assert refreshed(instance).status == WorkflowStatus.PAUSED

    instance.resume()
    harness.drain()

    assert refreshed(instance).result == "done"
    assert calls["after"] == 1


def test_cancel__from_inside_a_step_means_no_further_step_ever_runs(define, harness):
    calls = Counter()

    def execute(self):
        def first():
            calls["first"] += 1
            workerflow.cancel(self.key, reason="customer left")
            return "first"

        self.run("first", first)
        self.run("second", calls_to(calls, "second"))
        self.sleep("nap", 1)
        self.run("third", calls_to(calls, "third"))

    instance = workerflow.start(define(execute))
    harness.drain()
    harness.advance(timedelta(days=30))

    instance = refreshed(instance)
    assert instance.status == WorkflowStatus.CANCELLED
    assert instance.alarm_at is None
    assert instance.finished_at is not None
    assert calls == {"first": 1}
    assert list(Step.objects.values_list("step_id", flat=True)) == ["first"]
    # The boundary is the start of the next step: the step in flight records its outcome.
    assert step("first").state == "succeeded"
    assert instance.lease_token is None
    assert instance.workflow_events.last().reason == "customer left"
    assert workerflow.cancel(instance) is False
    assert harness.drain() == 0


def test_cancel__of_a_sleeping_instance_means_the_sleep_never_resumes_it(define, harness):
    calls = Counter()

    def execute(self):
        self.sleep("nap", 10)
        self.run("after", calls_to(calls, "after"))

    instance = workerflow.start(define(execute))
    harness.drain()
    instance.cancel()
    harness.advance(3600)

    assert calls["after"] == 0
    assert refreshed(instance).status == WorkflowStatus.CANCELLED


# The status signal -------------------------------------------------------------------


@pytest.fixture
def status_signals():
    """Every ``workflow_status_changed`` as (sender, key, status, previous, instance status)."""
    received = []

    def receiver(sender, instance, status, previous_status, **kwargs):
        received.append((sender, instance.key, status, previous_status, instance.status))

    workflow_status_changed.connect(receiver, weak=False)
    yield received
    workflow_status_changed.disconnect(receiver)


def test_status_signal__is_sent_for_every_change_with_the_definition_as_sender(
    define, harness, status_signals
):
    definition = define(lambda self: self.wait("go", "go"))
    instance = workerflow.start(definition, key="signal-1")
    harness.drain()
    instance.pause()
    instance.resume()
    workerflow.send_event(instance, "go")
    harness.drain()
    other = workerflow.start(definition, key="signal-2")
    other.cancel()
    harness.drain()

    assert status_signals == [
        (definition, "signal-1", "pending", None, "pending"),
        (definition, "signal-1", "running", "pending", "running"),
        (definition, "signal-1", "paused", "running", "paused"),
        (definition, "signal-1", "running", "paused", "running"),
        (definition, "signal-1", "completed", "running", "completed"),
        (definition, "signal-2", "pending", None, "pending"),
        (definition, "signal-2", "cancelled", "pending", "cancelled"),
    ]


def test_status_signal__reports_failures(define, harness, status_signals):
    def execute(self):
        raise RuntimeError("broken")

    definition = define(execute)
    workerflow.start(definition, key="signal-failed")
    harness.drain()

    assert status_signals[-1] == (definition, "signal-failed", "failed", "running", "failed")


@pytest.mark.django_db(transaction=True)
def test_status_signal__is_sent_after_commit(define, status_signals):
    definition = define(lambda self: None)

    with transaction.atomic():
        workerflow.start(definition, key="committed")
        assert status_signals == []

    assert status_signals == [(definition, "committed", "pending", None, "pending")]


@pytest.mark.django_db(transaction=True)
def test_status_signal__outside_a_transaction_reports_the_instance_start_returns(define):
    definition = define(lambda self: None)
    received = []

    def receiver(sender, instance, status, **kwargs):
        received.append((instance, instance.pk, status))

    workflow_status_changed.connect(receiver, weak=False)
    try:
        instance = workerflow.start(definition, key="autocommit")
    finally:
        workflow_status_changed.disconnect(receiver)

    # Committed when start() returns: the signal was sent with the very object, its id set.
    assert [(id(sent), pk, status) for sent, pk, status in received] == [
        (id(instance), instance.pk, "pending")
    ]
    assert WorkflowInstance.objects.filter(pk=instance.pk, status="pending").exists()


@pytest.mark.django_db(transaction=True)
def test_status_signal__is_not_sent_for_a_rolled_back_transaction(define, status_signals):
    definition = define(lambda self: None)

    def start_then_roll_back():
        with transaction.atomic():
            workerflow.start(definition, key="rolled-back")
            raise RuntimeError("roll back")

    with pytest.raises(RuntimeError):
        start_then_roll_back()

    assert status_signals == []
    assert not WorkflowInstance.objects.filter(key="rolled-back").exists()


# One replay per tick -----------------------------------------------------------------


def test_tick__runs_fifty_sequential_steps_with_one_replay(define, harness):
    executions = Counter()
    calls = Counter()

    def execute(self):
        executions["execute"] += 1
        return [self.run(f"step-{n}", calls_to(calls, f"step-{n}", n)) for n in range(50)]

    instance = workerflow.start(define(execute))

    assert harness.drain() == 1
    assert executions["execute"] == 1
    assert refreshed(instance).result == list(range(50))
    assert calls == {f"step-{n}": 1 for n in range(50)}
    assert len(step_events_of(instance)) == 100


def test_tick__replays_once_per_suspension(define, harness):
    executions = Counter()

    def execute(self):
        executions["execute"] += 1
        for n in range(3):
            self.run(f"before-{n}", lambda: None)
        self.sleep("nap", 10)
        for n in range(3):
            self.run(f"after-{n}", lambda: None)

    workerflow.start(define(execute))
    harness.drain()
    assert executions["execute"] == 1
    harness.advance(10)

    assert executions["execute"] == 2
    assert WorkflowEvent.objects.filter(type="completed").count() == 1


def test_send_event__logs_the_payload_only_when_configured(
    define, workerflow_harness, caplog, settings
):
    import logging

    def execute(self):
        return self.wait("w", "secret.event")

    instance = workerflow.start(define(execute), key="log-payload")
    workerflow_harness.drain()
    with caplog.at_level(logging.INFO, logger="django_workerflow"):
        workerflow.send_event(instance, "secret.event", {"card": "4111"})
    assert "4111" not in caplog.text
    caplog.clear()
    settings.WORKERFLOW_LOG_PAYLOADS = True
    with caplog.at_level(logging.INFO, logger="django_workerflow"):
        workerflow.send_event(instance, "secret.event", {"card": "4111"})
    assert 'payload={"card":"4111"}' in caplog.text
