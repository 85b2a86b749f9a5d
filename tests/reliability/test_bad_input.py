"""Bad input: each is refused with an error that names the problem, and nothing is written.

At a call site (start, send_event, pause, resume, cancel, a class statement) "nothing
written" means the row counts of all five engine tables are unchanged. Inside ``execute()``
the error fails the workflow with a message naming the problem, and no step row is written
for the call that was refused.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.urls import reverse

import django_workerflow as workerflow
from django_workerflow import WorkflowDefinition, registry
from django_workerflow.models import Step, StepEvent, WorkflowInstance, WorkflowStatus
from django_workerflow.runtime import verbs

from ..bad_values import (
    DEADLINES,
    DURATIONS,
    IDENTIFIERS,
    KEYS,
    MAX_ATTEMPTS,
    NOT_JSON,
    OPERATIONS_BY_KEY,
    TIMEOUTS,
)
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


def waits_for_go(self):
    return self.wait("go", "go")


@pytest.fixture
def waiting(define, workerflow_harness) -> WorkflowInstance:
    """An instance waiting for event 'go', so that calls on it have rows to disturb."""
    instance = workerflow.start(define(waits_for_go), key="waiting-1", input={"n": 1})
    workerflow_harness.drain()
    instance.refresh_from_db()
    assert instance.status == WorkflowStatus.RUNNING
    return instance


def refused(call: Callable[[], Any], error: type[BaseException], *fragments: str) -> None:
    """``call`` raises ``error`` whose message holds every fragment, and writes no row."""
    TRIED["call_site"] += 1
    before = table_counts()
    with pytest.raises(error) as raised:
        call()
    message = str(raised.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    assert table_counts() == before


# Call sites: start ---------------------------------------------------------------------


@pytest.mark.parametrize(("value", "problem"), NOT_JSON)
def test_start__input_that_is_not_json_is_refused(define, waiting, value, problem):
    definition = define(waits_for_go)

    refused(
        lambda: workerflow.start(definition, key="new", input=value),
        workerflow.WorkflowInputError,
        "The workflow input",
        problem,
    )


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


@pytest.mark.parametrize(("key", "problem"), KEYS)
def test_start__unusable_key_is_refused(define, waiting, key, problem):
    definition = define(waits_for_go)

    refused(
        lambda: workerflow.start(definition, key=key),
        workerflow.WorkflowInputError,
        "instance key",
        problem,
    )


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


# Call sites: send_event and control operations ------------------------------------------


@pytest.mark.parametrize(("value", "problem"), NOT_JSON)
def test_send_event__payload_that_is_not_json_is_refused(waiting, value, problem):
    refused(
        lambda: workerflow.send_event(waiting, "go", value),
        workerflow.WorkflowInputError,
        "The payload of event 'go'",
        problem,
    )
    assert Step.objects.get(instance=waiting, step_id="go").state == "waiting"


def test_send_event__payload_over_the_size_limit_is_refused(waiting, small_json_limit):
    refused(
        lambda: workerflow.send_event(waiting, "go", {"blob": "b" * small_json_limit}),
        workerflow.WorkflowInputError,
        "The payload of event 'go' is",
        f"more than the limit of {small_json_limit} bytes",
    )
    assert Step.objects.get(instance=waiting, step_id="go").state == "waiting"


@pytest.mark.parametrize(("name", "problem"), IDENTIFIERS)
def test_send_event__unusable_event_name_is_refused(waiting, name, problem):
    refused(
        lambda: workerflow.send_event(waiting, name, {"ok": True}),
        workerflow.WorkflowInputError,
        "An event name",
        problem,
    )


@pytest.mark.parametrize("operation", OPERATIONS_BY_KEY)
def test_operations__on_an_unknown_key_are_refused_naming_the_key(waiting, operation):
    refused(lambda: operation("no-such-key-42"), Exception, "no-such-key-42")


@pytest.mark.parametrize("reason", [42, ["why"], b"why"])
def test_cancel__reason_that_is_not_a_string_is_refused(waiting, reason):
    refused(
        lambda: workerflow.cancel(waiting, reason=reason),
        workerflow.WorkflowInputError,
        "cancel reason must be a string",
    )
    waiting.refresh_from_db()
    assert waiting.status == WorkflowStatus.RUNNING


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
    """Run ``bad_call`` inside execute(): the instance fails with a message holding every
    fragment, and only the step before it has a row."""
    TRIED["inside_execute"] += 1
    instance = workerflow.start(define(failing_workflow(bad_call)))
    harness.drain()

    instance.refresh_from_db()
    assert instance.status == WorkflowStatus.FAILED, instance.status
    for fragment in fragments:
        assert fragment in instance.error_message, f"{fragment!r} not in {instance.error_message!r}"
    assert list(Step.objects.filter(instance=instance).values_list("step_id", flat=True)) == [
        "before"
    ]
    assert set(
        StepEvent.objects.filter(instance=instance).values_list("step__step_id", flat=True)
    ) == {"before"}
    return instance


@pytest.mark.parametrize(("step_id", "problem"), IDENTIFIERS)
@pytest.mark.parametrize(
    "helper",
    [
        pytest.param(lambda self, step_id: self.run(step_id, noop), id="run"),
        pytest.param(lambda self, step_id: self.sleep(step_id, 1), id="sleep"),
        pytest.param(
            lambda self, step_id: self.sleep_until(step_id, datetime(2030, 1, 1, tzinfo=UTC)),
            id="sleep_until",
        ),
        pytest.param(lambda self, step_id: self.wait(step_id, "go"), id="wait"),
    ],
)
def test_step__unusable_step_id_fails_the_workflow_naming_the_problem(
    define, workerflow_harness, helper, step_id, problem
):
    fails_naming(
        define, workerflow_harness, lambda self: helper(self, step_id), "A step id", problem
    )


@pytest.mark.parametrize(("name", "problem"), IDENTIFIERS)
def test_wait__unusable_event_name_fails_the_workflow_naming_the_problem(
    define, workerflow_harness, name, problem
):
    fails_naming(
        define,
        workerflow_harness,
        lambda self: self.wait("answer", name),
        "The event name of wait step 'answer'",
        problem,
    )


@pytest.mark.parametrize(("duration", "problem"), DURATIONS)
def test_sleep__unusable_duration_fails_the_workflow_naming_the_problem(
    define, workerflow_harness, duration, problem
):
    fails_naming(
        define,
        workerflow_harness,
        lambda self: self.sleep("nap", duration),
        "The duration of sleep step 'nap'",
        problem,
    )


@pytest.mark.parametrize(("duration", "problem"), TIMEOUTS)
def test_wait__unusable_timeout_fails_the_workflow_naming_the_problem(
    define, workerflow_harness, duration, problem
):
    fails_naming(
        define,
        workerflow_harness,
        lambda self: self.wait("answer", "go", timeout=duration),
        "The timeout of wait step 'answer'",
        problem,
    )


@pytest.mark.parametrize(("when", "problem"), DEADLINES)
def test_sleep_until__unusable_time_fails_the_workflow_naming_the_problem(
    define, workerflow_harness, when, problem
):
    fails_naming(
        define,
        workerflow_harness,
        lambda self: self.sleep_until("nap", when),
        "sleep step 'nap'",
        problem,
    )


@pytest.mark.parametrize(("when", "problem"), DEADLINES)
def test_wait__unusable_timeout_at_fails_the_workflow_naming_the_problem(
    define, workerflow_harness, when, problem
):
    fails_naming(
        define,
        workerflow_harness,
        lambda self: self.wait("answer", "go", timeout_at=when),
        "The timeout_at of wait step 'answer'",
        problem,
    )


def test_wait__both_timeout_and_timeout_at_fail_the_workflow_naming_the_step(
    define, workerflow_harness
):
    fails_naming(
        define,
        workerflow_harness,
        lambda self: self.wait(
            "answer", "go", timeout=60, timeout_at=datetime(2030, 1, 1, tzinfo=UTC)
        ),
        "Wait step 'answer' got both timeout and timeout_at",
    )


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        *(
            pytest.param(
                {"max_attempts": case.values[0]}, "max_attempts of run step 'charge'", id=case.id
            )
            for case in MAX_ATTEMPTS
        ),
        pytest.param({"fn": "not callable"}, "Run step 'charge' needs a callable", id="no-fn"),
    ],
)
def test_run__unusable_options_fail_the_workflow_naming_the_problem(
    define, workerflow_harness, options, problem
):
    fn = options.pop("fn", noop)
    fails_naming(
        define, workerflow_harness, lambda self: self.run("charge", fn, **options), problem
    )


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
        assert StepEvent.objects.filter(step=step, result__isnull=False).count() == 0
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
    attempts = StepEvent.objects.filter(step=step, type="attempt_started").count()
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
    deeper_by(100, lambda: verbs.tick(waiting.pk))
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
