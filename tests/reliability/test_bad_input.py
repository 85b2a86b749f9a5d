"""Bad input: each is refused with an error that names the problem, and nothing is written.

The one bad-input matrix: every place a user value enters the engine (a call site, or a
step helper inside ``execute()``) crossed with every bad value of its kind (the value
tables are in tests/support/bad_values.py). At a call site (start, send_event, pause, resume,
cancel, a class statement) "nothing written" means the row counts of all five engine tables
are unchanged. Inside ``execute()`` the error is a WorkflowInputError the workflow can catch
(no step row is written for the call), and uncaught it fails the workflow with a message
naming the problem.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.urls import reverse

import django_workerflow as workerflow
from django_workerflow import WorkflowDefinition, registry
from django_workerflow.models import Step, WorkflowInstance, WorkflowStatus, step_events_of
from django_workerflow.runtime.tick import tick
from django_workerflow.values.jsonvalue import MAX_NESTING
from tests.support.bad_values import (
    DEADLINES,
    DURATIONS,
    IDENTIFIERS,
    KEYS,
    MAX_ATTEMPTS,
    NOT_JSON,
    OPERATIONS_BY_KEY,
    SURROGATE,
    TIMEOUTS,
    UNSTORABLE_TEXT,
    embedded,
    nested_levels,
)
from tests.support.instances import waits_for_go

from .conftest import print_figures, table_counts

pytestmark = [pytest.mark.reliability, pytest.mark.django_db]

SMALL_LIMIT = 1000  # bytes: WORKERFLOW_MAX_JSON_BYTES lowered for the size cases
TRIED: Counter[str] = Counter()


@pytest.fixture(scope="module", autouse=True)
def tally() -> Iterator[None]:
    """Print how many bad inputs the module tried, once it is done."""
    TRIED.clear()
    yield
    print_figures(
        "bad input",
        bad_inputs_tried=sum(TRIED.values()),
        **{f"at_{where}": count for where, count in sorted(TRIED.items())},
    )


@pytest.fixture
def small_json_limit(settings) -> int:
    settings.WORKERFLOW_MAX_JSON_BYTES = SMALL_LIMIT
    return SMALL_LIMIT


def refused(call: Callable[[], Any], error: type[BaseException], *fragments: str) -> BaseException:
    """``call`` raises ``error`` whose message holds every fragment, and writes no row;
    return the error."""
    TRIED["call_site"] += 1
    before = table_counts()
    with pytest.raises(error) as raised:
        call()
    message = str(raised.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    assert table_counts() == before
    return raised.value


def fragments(*parts: str | tuple[str, ...]) -> tuple[str, ...]:
    """The message fragments of a case: strings, or tuples of them, flattened."""
    return tuple(
        fragment for part in parts for fragment in ((part,) if isinstance(part, str) else part)
    )


def matrix(site: str, *kinds: Sequence[Any]) -> list[Any]:
    """``site`` crossed with every case of ``kinds``: ``pytest.param(site, value, problem)``."""
    return [
        pytest.param(site, case.values[0], case.values[1], id=f"{site}-{case.id}")
        for kind in kinds
        for case in kind
    ]


# Call sites --------------------------------------------------------------------------
#
# ``CALLS[site](definition, waiting, value)`` passes ``value`` where the site takes it;
# ``SUBJECT[site]`` is what the message names.

CALLS: dict[str, Callable[[Any, WorkflowInstance, Any], Any]] = {
    "start-input": lambda definition, waiting, value: workerflow.start(
        definition, key="new", input=value
    ),
    "start-key": lambda definition, waiting, value: workerflow.start(definition, key=value),
    "send_event-payload": lambda definition, waiting, value: workerflow.send_event(
        waiting, "go", value
    ),
    "send_event-name": lambda definition, waiting, value: workerflow.send_event(
        waiting, value, {"ok": True}
    ),
    "send_event-key": lambda definition, waiting, value: workerflow.send_event(value, "go"),
    "cancel-reason": lambda definition, waiting, value: workerflow.cancel(waiting, reason=value),
}
SUBJECT = {
    "start-input": "The workflow input",
    "start-key": "instance key",
    "send_event-payload": "The payload of event 'go'",
    "send_event-name": "An event name",
    "send_event-key": "instance key",
    "cancel-reason": "cancel reason",
}


def not_json_at(site: str) -> list[Any]:
    """NOT_JSON at ``site``, the message reading "<subject> is not JSON-serializable"."""
    return [
        pytest.param(case.values[0], f"{SUBJECT[site]} is not JSON-serializable", id=case.id)
        for case in NOT_JSON
    ]


CALL_SITES = [
    *matrix(
        "start-input",
        not_json_at("start-input"),
        [
            pytest.param({"name": SURROGATE}, "surrogate", id="surrogate-value"),
            pytest.param({SURROGATE: 1}, "surrogate", id="surrogate-key"),
            pytest.param([["deep", f"a{SURROGATE}b"]], "surrogate", id="surrogate-nested"),
            pytest.param(10**5000, "4300", id="integer-over-4300-digits"),
            pytest.param(
                nested_levels(MAX_NESTING + 1), "JSON nesting limit of 100 levels", id="nest"
            ),
        ],
    ),
    *matrix("start-key", KEYS, embedded(lambda c: f"order{c}1")),
    *matrix(
        "send_event-payload",
        not_json_at("send_event-payload"),
        embedded(lambda c: {"note": c}, UNSTORABLE_TEXT[:1]),  # NUL is escaped in JSON
    ),
    *matrix("send_event-name", IDENTIFIERS, embedded(lambda c: f"go{c}")),
    *matrix("send_event-key", embedded(lambda c: f"waiting{c}")),
    *matrix(
        "cancel-reason",
        [
            pytest.param(42, "cancel reason must be a string", id="int"),
            pytest.param(["why"], "cancel reason must be a string", id="list"),
            pytest.param(b"why", "cancel reason must be a string", id="bytes"),
        ],
        embedded(lambda c: f"because{c}"),
    ),
]


@pytest.mark.parametrize(("site", "value", "problem"), CALL_SITES)
def test_call_site__bad_input_is_refused_naming_the_problem_and_writes_nothing(
    define, waiting, site, value, problem
):
    definition = define(waits_for_go)

    error = refused(
        lambda: CALLS[site](definition, waiting, value),
        workerflow.WorkflowInputError,
        *fragments(SUBJECT[site], problem),
    )

    assert isinstance(error, ValueError)
    waiting.refresh_from_db()
    assert waiting.status == WorkflowStatus.RUNNING
    assert Step.objects.get(instance=waiting, step_id="go").state == "waiting"


def test_start__input_over_the_size_limit_is_refused_and_at_the_limit_accepted(
    define, waiting, small_json_limit
):
    definition = define(waits_for_go)
    at_limit = "a" * (small_json_limit - 2)  # the quotes make it exactly the limit
    multibyte = "€" * (small_json_limit // 3)  # 3 bytes each in UTF-8: over the limit

    for value in (at_limit + "a", multibyte, {"items": [at_limit]}):
        refused(
            lambda value=value: workerflow.start(definition, key="big", input=value),
            workerflow.WorkflowInputError,
            "The workflow input is",
            f"more than the limit of {small_json_limit} bytes",
            "WORKERFLOW_MAX_JSON_BYTES",
        )
    assert workerflow.start(definition, key="just-fits", input=at_limit).input == at_limit


def test_send_event__payload_over_the_size_limit_is_refused(waiting, small_json_limit):
    refused(
        lambda: workerflow.send_event(waiting, "go", {"blob": "b" * small_json_limit}),
        workerflow.WorkflowInputError,
        "The payload of event 'go' is",
        f"more than the limit of {small_json_limit} bytes",
    )
    assert Step.objects.get(instance=waiting, step_id="go").state == "waiting"


def test_start__unknown_name_is_refused_naming_it(waiting):
    refused(
        lambda: workerflow.start("no-such-workflow"),
        workerflow.WorkflowNotRegisteredError,
        "'no-such-workflow'",
    )


def test_start__unknown_version_is_refused_naming_it_and_the_known_ones(define, waiting):
    definition = define(waits_for_go, version="7")

    refused(
        lambda: workerflow.start(definition.name, version="8"),
        workerflow.WorkflowNotRegisteredError,
        f"'{definition.name}'",
        "'8'",
        "7",
    )


def test_start__something_that_is_not_a_definition_is_refused(waiting):
    refused(
        lambda: workerflow.start(42),  # type: ignore[arg-type]
        workerflow.WorkflowInputError,
        "definition name or class",
        "int",
    )


@pytest.mark.parametrize("operation", OPERATIONS_BY_KEY)
def test_operations__on_an_unknown_key_raise_does_not_exist_naming_the_key(waiting, operation):
    refused(lambda: operation("no-such-key-42"), WorkflowInstance.DoesNotExist, "no-such-key-42")


@pytest.mark.parametrize(
    "operation",
    [
        pytest.param(lambda: workerflow.pause(42), id="pause"),
        pytest.param(lambda: workerflow.send_event(3.5, "go"), id="send_event"),
        pytest.param(lambda: workerflow.cancel(None), id="cancel"),
    ],
)
def test_operations__on_something_that_is_not_an_instance_are_refused(waiting, operation):
    refused(operation, workerflow.WorkflowInputError, "WorkflowInstance or an instance key")


# Class statements: definitions ----------------------------------------------------------


def registered() -> set[tuple[str, str]]:
    return {(name, version) for name in registry.names() for version in registry.versions(name)}


@pytest.mark.parametrize(
    ("attrs", "problem"),
    [
        pytest.param({}, "set `name`", id="no-name"),
        pytest.param({"name": ""}, "set `name`", id="empty-name"),
        pytest.param({"name": "   "}, "set `name`", id="blank-name"),
        pytest.param({"name": 42}, "set `name`", id="int-name"),
        pytest.param({"name": "n" * 201}, "at most 200 characters", id="long-name"),
        pytest.param({"name": "ok", "version": ""}, "set `version`", id="empty-version"),
        pytest.param({"name": "ok", "version": 2}, "set `version`", id="int-version"),
        pytest.param({"name": "ok", "version": "v" * 101}, "at most 100", id="long-version"),
        *(
            pytest.param({"name": f"bad{case.values[0]}"}, "`name`", id=f"{case.id}-name")
            for case in UNSTORABLE_TEXT
        ),
    ],
)
def test_definition__without_a_usable_name_or_version_is_improperly_configured(
    waiting, attrs, problem
):
    before = registered()

    def declare() -> None:
        type(
            "Broken",
            (WorkflowDefinition,),
            {"execute": lambda self: None, "__module__": __name__, **attrs},
        )

    refused(declare, ImproperlyConfigured, "Broken", "incomplete", problem)
    assert registered() == before


# Inside execute() -------------------------------------------------------------------------
#
# ``HELPERS[site](self, value)`` passes ``value`` where the step helper takes it.

HELPERS: dict[str, Callable[[Any, Any], Any]] = {
    "run-step-id": lambda self, value: self.run(value, noop),
    "sleep-step-id": lambda self, value: self.sleep(value, 1),
    "sleep_until-step-id": lambda self, value: self.sleep_until(
        value, datetime(2030, 1, 1, tzinfo=UTC)
    ),
    "wait-step-id": lambda self, value: self.wait(value, "go"),
    "wait-event-name": lambda self, value: self.wait("answer", value),
    "sleep-duration": lambda self, value: self.sleep("nap", value),
    "wait-timeout": lambda self, value: self.wait("answer", "go", timeout=value),
    "sleep_until-time": lambda self, value: self.sleep_until("nap", value),
    "wait-timeout_at": lambda self, value: self.wait("answer", "go", timeout_at=value),
    "wait-both-timeouts": lambda self, value: self.wait(
        "answer", "go", timeout=value, timeout_at=datetime(2030, 1, 1, tzinfo=UTC)
    ),
    "run-max_attempts": lambda self, value: self.run("charge", noop, max_attempts=value),
    "run-fn": lambda self, value: self.run("charge", value),
}
HELPER_SUBJECT = {
    "run-step-id": "A step id",
    "sleep-step-id": "A step id",
    "sleep_until-step-id": "A step id",
    "wait-step-id": "A step id",
    "wait-event-name": "The event name of wait step 'answer'",
    "sleep-duration": "The duration of sleep step 'nap'",
    "wait-timeout": "The timeout of wait step 'answer'",
    "sleep_until-time": "sleep step 'nap'",
    "wait-timeout_at": "The timeout_at of wait step 'answer'",
    "wait-both-timeouts": "Wait step 'answer' got both timeout and timeout_at",
    "run-max_attempts": "max_attempts of run step 'charge'",
    "run-fn": "Run step 'charge' needs a callable",
}

INSIDE_EXECUTE = [
    *matrix("run-step-id", IDENTIFIERS, embedded(lambda c: f"step{c}")),
    *matrix("sleep-step-id", IDENTIFIERS, embedded(lambda c: f"nap{c}")),
    *matrix("sleep_until-step-id", IDENTIFIERS),
    *matrix("wait-step-id", IDENTIFIERS, embedded(lambda c: f"w{c}")),
    *matrix("wait-event-name", IDENTIFIERS, embedded(lambda c: f"go{c}")),
    *matrix("sleep-duration", DURATIONS),
    *matrix("wait-timeout", TIMEOUTS),
    *matrix(
        "sleep_until-time",
        DEADLINES,
        [pytest.param(datetime(2100, 1, 1), "timezone-aware", id="naive-2100")],
    ),
    *matrix(
        "wait-timeout_at",
        DEADLINES,
        [pytest.param(datetime(2100, 1, 1), "timezone-aware", id="naive-2100")],
    ),
    *matrix("wait-both-timeouts", [pytest.param(60, (), id="60"), pytest.param(5, (), id="5")]),
    *matrix("run-max_attempts", MAX_ATTEMPTS),
    *matrix(
        "run-fn",
        [pytest.param("not callable", (), id="str"), pytest.param(42, (), id="int")],
    ),
]


def noop() -> str:
    return "ok"


def failing_workflow(bad_call: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A definition body: one good step, then ``bad_call(self)``, then a step never reached."""

    def execute(self):
        self.run("before", noop)
        bad_call(self)
        self.run("after", noop)

    return execute


def fails_naming(define, harness, bad_call, *fragments: str) -> WorkflowInstance:
    """Run ``bad_call`` inside execute(): the instance fails with a WorkflowInputError whose
    message holds every fragment, and only the step before it has a row."""
    TRIED["inside_execute"] += 1
    instance = workerflow.start(define(failing_workflow(bad_call)))
    harness.drain()

    instance.refresh_from_db()
    assert instance.status == WorkflowStatus.FAILED, instance.status
    assert instance.error_name == "WorkflowInputError", instance.error_name
    for fragment in fragments:
        assert fragment in instance.error_message, f"{fragment!r} not in {instance.error_message!r}"
    assert list(Step.objects.filter(instance=instance).values_list("step_id", flat=True)) == [
        "before"
    ]
    assert {event.step.step_id for event in step_events_of(instance)} == {"before"}
    return instance


def caught_inside(define, harness, bad_call) -> workerflow.WorkflowInputError:
    """Run ``bad_call(self)`` inside execute() and return the WorkflowInputError it raised,
    which the workflow caught; nothing was recorded for the call."""
    TRIED["inside_execute"] += 1
    caught: list[workerflow.WorkflowInputError] = []

    def execute(self):
        try:
            bad_call(self)
        except workerflow.WorkflowInputError as exc:
            caught.append(exc)
            return "rejected"
        return "accepted"

    instance = workerflow.start(define(execute))
    harness.drain()
    instance.refresh_from_db()
    assert instance.result == "rejected", "the call was accepted"
    assert Step.objects.count() == 0
    assert isinstance(caught[0], ValueError)
    return caught[0]


@pytest.mark.parametrize(("site", "value", "problem"), INSIDE_EXECUTE)
def test_step_helper__bad_input_fails_the_workflow_naming_the_problem(
    define, workerflow_harness, site, value, problem
):
    fails_naming(
        define,
        workerflow_harness,
        lambda self: HELPERS[site](self, value),
        *fragments(HELPER_SUBJECT[site], problem),
    )


@pytest.mark.parametrize(("site", "value", "problem"), INSIDE_EXECUTE)
def test_step_helper__bad_input_raises_an_input_error_the_workflow_can_catch(
    define, workerflow_harness, site, value, problem
):
    error = caught_inside(define, workerflow_harness, lambda self: HELPERS[site](self, value))

    for fragment in fragments(HELPER_SUBJECT[site], problem):
        assert fragment in str(error), f"{fragment!r} not in {str(error)!r}"


# Inside execute(): values the workflow produces ------------------------------------------


def unserializable_results(limit: int) -> list[tuple[str, Any, str]]:
    """(name, value, what the error says about it)."""
    return [
        ("object", object(), "Object of type object is not JSON serializable"),
        ("nan", math.nan, "not JSON compliant"),
        ("set", {1}, "Object of type set is not JSON serializable"),
        ("too-big", "r" * limit, f"more than the limit of {limit} bytes"),
    ]


def test_run__result_that_is_not_json_or_too_big_fails_the_step_without_storing_it(
    define, workerflow_harness, small_json_limit
):
    for name, value, problem in unserializable_results(small_json_limit):
        TRIED["inside_execute"] += 1

        def execute(self, value=value):
            self.run("before", noop)
            self.run("produce", lambda: value)
            self.run("after", noop)

        instance = workerflow.start(define(execute), key=f"result-{name}")
        workerflow_harness.drain()

        instance.refresh_from_db()
        assert instance.status == WorkflowStatus.FAILED, name
        for fragment in ("'produce'", "JSON", problem):
            assert fragment in instance.error_message, (name, instance.error_message)
        step = Step.objects.get(instance=instance, step_id="produce")
        # The attempt is on record, the unstorable value is not; one attempt, no retries.
        assert (step.state, step.result, step.attempt_count) == ("failed", None, 1), name
        assert problem in step.error_message, (name, step.error_message)
        assert [e for e in step_events_of(instance, [step]) if e.result is not None] == []
        assert not Step.objects.filter(instance=instance, step_id="after").exists()


def test_execute__return_value_that_is_not_json_or_too_big_fails_the_workflow(
    define, workerflow_harness, small_json_limit
):
    for name, value, problem in unserializable_results(small_json_limit):
        TRIED["inside_execute"] += 1
        instance = workerflow.start(define(lambda self, value=value: value), key=f"ret-{name}")
        workerflow_harness.drain()

        instance.refresh_from_db()
        assert instance.status == WorkflowStatus.FAILED, name
        assert instance.result is None
        for fragment in ("The workflow's return value", problem):
            assert fragment in instance.error_message, (name, instance.error_message)


@pytest.mark.parametrize(
    ("backoff", "problem"),
    [
        pytest.param(lambda attempt: -1, "must not be negative", id="negative"),
        pytest.param(lambda attempt: math.nan, "must be a finite number", id="nan"),
        pytest.param(lambda attempt: timedelta(days=4000), "longer than the limit", id="absurd"),
        pytest.param(lambda attempt: "soon", "not str", id="str"),
        pytest.param("fast", "backoff", id="not-callable"),
    ],
)
def test_run__unusable_backoff_delay_fails_the_workflow_naming_it(
    define, workerflow_harness, backoff, problem
):
    TRIED["inside_execute"] += 1

    def execute(self):
        def flaky():
            raise RuntimeError("first attempt fails")

        self.run("flaky", flaky, max_attempts=3, backoff=backoff)

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()

    instance.refresh_from_db()
    assert instance.status == WorkflowStatus.FAILED, instance.status
    # The attempt that failed is recorded as failed, not left 'running' in a failed instance.
    step = Step.objects.get(instance=instance, step_id="flaky")
    assert step.state == "failed", (step.state, instance.error_message)
    # The message names the step, its backoff and what is wrong with the delay.
    for fragment in ("'flaky'", "backoff", problem):
        assert fragment in instance.error_message, instance.error_message


def test_run__unusable_backoff_caught_by_the_workflow_never_reruns_the_step_unrecorded(
    define, workerflow_harness
):
    """Code may catch the error and go on; the refused step must not stay 'running', where
    the next replay would run its callback again without recording an attempt."""
    TRIED["inside_execute"] += 1
    calls = Counter()

    def execute(self):
        def flaky():
            calls[self.key] += 1
            raise RuntimeError("fails")

        try:
            self.run("flaky", flaky, backoff=lambda attempt: -1)
        except Exception as exc:
            error = type(exc).__name__
            self.run("note", lambda: error)
        return self.wait("go", "go")

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()
    workerflow.send_event(instance, "go", 1)
    workerflow_harness.drain()

    instance.refresh_from_db()
    step = Step.objects.get(instance=instance, step_id="flaky")
    attempts = sum(e.type == "attempt_started" for e in step_events_of(instance, [step]))
    assert instance.status == WorkflowStatus.COMPLETED
    assert calls[instance.key] == attempts, (calls[instance.key], attempts)
    assert step.state != "running"


# Deeply nested JSON ------------------------------------------------------------------------
#
# Python's JSON encoder and decoder recurse once per level, against the interpreter's
# recursion limit (1000), so how deep a value may be depends on how deep the caller's stack
# already is. A value accepted where the stack is shallow can then be unreadable where it is
# deeper: a tick in a worker, or the admin page that renders it.

DEEP = 900  # levels; as a payload it is under 2 KB


def nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def deeper_by(frames: int, call: Callable[[], Any]) -> Any:
    """Call ``call`` with ``frames`` more frames on the stack (a worker's deeper stack)."""
    return call() if frames == 0 else deeper_by(frames - 1, call)


def refusal_of(call: Callable[[], Any]) -> str | None:
    """The message of the WorkflowInputError ``call`` raises, or None if it succeeds."""
    try:
        call()
    except workerflow.WorkflowInputError as exc:
        return str(exc)
    return None


def test_send_event__deeply_nested_payload_cannot_poison_the_instance(
    define, workerflow_harness, waiting
):
    """A small hostile payload, nested DEEP levels, is either refused with an error naming
    its depth or delivered: a worker ticking with a deeper stack than the sender's must not
    crash on it (every retry would crash again, and the instance would never move)."""
    TRIED["call_site"] += 1
    before = table_counts()

    refusal = refusal_of(lambda: workerflow.send_event(waiting, "go", nested(DEEP)))

    if refusal is not None:
        assert any(word in refusal for word in ("deep", "depth", "nest")), refusal
        assert table_counts() == before
        return
    deeper_by(100, lambda: tick(waiting.pk))
    waiting.refresh_from_db()
    assert waiting.status == WorkflowStatus.COMPLETED, (waiting.status, waiting.error_message)


def test_start__deeply_nested_input_is_refused_or_shown_in_the_admin(
    define, workerflow_harness, admin_client
):
    """An input the engine accepts can always be looked at: the instance page renders it."""
    TRIED["call_site"] += 1
    before = table_counts()
    definition = define(waits_for_go)

    refusal = refusal_of(lambda: workerflow.start(definition, key="deep", input=nested(DEEP)))

    if refusal is not None:
        assert any(word in refusal for word in ("deep", "depth", "nest")), refusal
        assert table_counts() == before
        return
    workerflow_harness.drain()
    instance = WorkflowInstance.objects.get(key="deep")
    page = admin_client.get(reverse("admin:workerflow_workflowinstance_change", args=[instance.pk]))
    assert page.status_code == 200
