"""Control races: pause, resume, cancel, send_event, start and ticks fired concurrently at
random (hypothesis stateful testing), checked after every step against a model of the status
machine.

The model is the set of legal lifecycle transitions::

    created -> started -> (paused -> resumed)* -> completed | failed | cancelled

where ``cancelled`` may also follow ``created`` (pending) or ``paused``, and nothing follows a
terminal event. Each step of the machine fires two or three operations at one instance from
separate threads and waits for them (with a timeout: a deadlock fails the test); one kind of
step first pauses the instance outright, so that its resume has a paused instance to race
for. Afterwards:

- every instance's WorkflowEvent history is a path through the model, and its status is the
  state that path ends in;
- each operation's reported outcome matches the history (a pause that returned True
  recorded exactly one ``paused`` event, and so on);
- no step attempt started while the instance was paused or after it finished, and every
  callback execution (counted in process) has its ``attempt_started`` event;
- nothing is stuck: no lease is left behind, and an active instance without an alarm waits
  for an event that has not arrived. At the end every instance is driven to a finish.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter, defaultdict
from datetime import datetime
from typing import Any, ClassVar

import pytest
from django.db import connection
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import django_workerflow as workerflow
from django_workerflow import NonRetryableStepError, WorkflowStateError
from django_workerflow.models import (
    InboundEvent,
    Step,
    StepEvent,
    StepEventType,
    StepState,
    StepType,
    WorkflowEvent,
    WorkflowInstance,
    step_events_of,
)
from django_workerflow.runtime.tick import tick
from django_workerflow.values import clock
from django_workerflow.workers import bells

from .conftest import in_threads, print_figures

pytestmark = pytest.mark.reliability

ROUNDS = 3  # each round: two run steps, then a wait for "go"
OPERATION_TIMEOUT = 30.0
# Weighted by repetition: a cancel ends an instance's story, so it comes up less often.
OPERATIONS = ("pause", "resume", "send_event", "tick") * 3 + ("cancel", "cancel", "start")
# Instances the start rule may add per machine; a race finding every instance of its
# machine finished starts another itself.
MAX_INSTANCES = 4
#: At most this many batches of examples, until every kind of transition was reached.
BATCHES = 3
FAIL_AT = st.sampled_from([None, None, None, "s1b", "s2a"])

# The model: from each lifecycle state, the events allowed next and the state they lead to.
# Terminal states have no entry: nothing may follow them.
MODEL: dict[str | None, dict[str, str]] = {
    None: {"created": "pending"},
    "pending": {"started": "running", "cancelled": "cancelled"},
    "running": {
        "paused": "paused",
        "completed": "completed",
        "failed": "failed",
        "cancelled": "cancelled",
    },
    "paused": {"resumed": "running", "cancelled": "cancelled"},
}
TERMINAL = {"completed", "failed", "cancelled"}

# When each callback execution began (engine clock), per (instance key, step id), in order.
CALLS: defaultdict[tuple[str, str], list[datetime]] = defaultdict(list)
_calls_lock = threading.Lock()
_keys = itertools.count()


def racing_workflow(self):
    """ROUNDS rounds of two counted run steps and a wait; fails at ``input["fail_at"]``."""

    def step(step_id: str) -> str:
        with _calls_lock:
            CALLS[(self.key, step_id)].append(clock.now())
        time.sleep(0.001)  # a window for a pause or cancel to land in
        if step_id == self.input.get("fail_at"):
            raise NonRetryableStepError(f"step {step_id} refuses")
        return step_id

    for i in range(ROUNDS):
        self.run(f"s{i}a", lambda i=i: step(f"s{i}a"))
        self.run(f"s{i}b", lambda i=i: step(f"s{i}b"))
        self.wait(f"w{i}", "go")
    return "done"


class Tally:
    """What the machine did and checked, over all examples."""

    def __init__(self) -> None:
        self.machines = 0
        self.steps = 0
        self.operations: Counter[str] = Counter()
        self.outcomes: Counter[str] = Counter()
        self.transitions_checked = 0
        self.transition_kinds: set[tuple[str | None, str]] = set()
        self.finishes: Counter[str] = Counter()


def check_history(key: str, tally: Tally) -> tuple[str, list[Any]]:
    """Walk the instance's lifecycle events through the model; return the state it ends in
    and the events (type, recorded_at) in order."""
    events = list(
        WorkflowEvent.objects.filter(instance__key=key)
        .order_by("recorded_at", "id")
        .values_list("type", "recorded_at")
    )
    state: str | None = None
    for event_type, _ in events:
        allowed = MODEL.get(state, {})
        assert event_type in allowed, (
            f"instance {key}: illegal transition {state} -> {event_type} in "
            f"{[t for t, _ in events]}"
        )
        tally.transitions_checked += 1
        tally.transition_kinds.add((state, event_type))
        state = allowed[event_type]
    assert state is not None, f"instance {key} has no 'created' event"
    return state, events


def stopped_stretches(events: list[Any]) -> list[tuple[datetime, datetime | None]]:
    """(since, until) of each paused stretch, and (since, None) once the instance stopped
    for good (paused or finished with no resume after)."""
    stretches: list[tuple[datetime, datetime | None]] = []
    paused_at = None
    for event_type, recorded_at in events:
        if event_type == "paused":
            paused_at = recorded_at
        elif event_type == "resumed":
            stretches.append((paused_at, recorded_at))
            paused_at = None
        elif event_type in TERMINAL:
            stretches.append((paused_at or recorded_at, None))
            paused_at = None
    if paused_at is not None:
        stretches.append((paused_at, None))
    return stretches


def attempt_starts(key: str) -> list[StepEvent]:
    """The ``attempt_started`` events of instance ``key``, stored and derived (a run step's
    first start is read from its row)."""
    instance = WorkflowInstance.objects.get(key=key)
    return [
        event for event in step_events_of(instance) if event.type == StepEventType.ATTEMPT_STARTED
    ]


def check_no_step_started_while_stopped(key: str, events: list[Any]) -> None:
    """No attempt started while the instance was paused, or after it finished.

    Timestamps alone cannot say it: the engine reads the clock before its write waits for
    the instance row lock, so an attempt that started just after a resume may carry a time
    from before it. What is certain: the pause (or finish) recorded at ``since`` read its
    clock holding the lock, so an attempt stamped later was written after that commit; and
    the attempt had committed before its callback began. An attempt stamped after ``since``
    whose callback began before the resume's time ``until`` (read holding the lock, before
    the resume committed) therefore started while the instance was stopped.
    """
    stretches = stopped_stretches(events)
    starts = [
        (event.step.step_id, event.attempt_number, event.recorded_at)
        for event in attempt_starts(key)
    ]
    with _calls_lock:
        began = {step: list(times) for (k, step), times in CALLS.items() if k == key}
    for step_id, attempt, stamped_at in starts:
        callback_at = began[step_id][attempt - 1]
        for since, until in stretches:
            inside = stamped_at > since and (until is None or callback_at < until)
            assert not inside, (
                f"instance {key}: attempt {attempt} of step {step_id} (stamped {stamped_at}, "
                f"callback at {callback_at}) started while stopped from {since} until {until}"
            )
    # Nor was any step (a wait included) created once the instance stopped for good.
    final = [since for since, until in stretches if until is None]
    if final:
        late = Step.objects.filter(instance__key=key, created_at__gt=final[0])
        assert not late.exists(), (
            f"instance {key}: steps {list(late.values_list('step_id', flat=True))} created "
            f"after it stopped for good at {final[0]}"
        )


def check_callbacks_match_attempts(key: str) -> None:
    """Every callback execution has its attempt_started event, and no more."""
    attempts = Counter(event.step.step_id for event in attempt_starts(key))
    with _calls_lock:
        calls = Counter({step: len(times) for (k, step), times in CALLS.items() if k == key})
    assert calls == attempts, f"instance {key}: callbacks {dict(calls)} != attempts {attempts}"


def check_not_stuck(key: str, state: str) -> None:
    """No lease left behind; an active instance either has an alarm or waits for an event
    that has not arrived; a stopped one has no alarm."""
    instance = WorkflowInstance.objects.get(key=key)
    assert instance.lease_token is None, f"instance {key}: lease left behind"
    if state in ("pending", "running") and instance.alarm_at is None:
        waiting = Step.objects.filter(
            instance=instance, type=StepType.WAIT, state=StepState.WAITING
        ).values_list("event_name", flat=True)
        assert waiting, f"instance {key}: {state}, no alarm and nothing to wait for"
        queued = InboundEvent.objects.filter(
            instance=instance, event_name__in=list(waiting), claimed_at__isnull=True
        )
        assert not queued.exists(), f"instance {key}: waits while its event is queued"
    if state not in ("pending", "running"):
        assert instance.alarm_at is None, f"instance {key}: {state} with an alarm"


class ControlRaces(RuleBasedStateMachine):
    """Instances of ``racing_workflow`` under concurrent control operations."""

    definition: ClassVar[type]
    tally: ClassVar[Tally]

    def __init__(self) -> None:
        super().__init__()
        self.keys: list[str] = []
        self.sent: Counter[str] = Counter()  # events each instance accepted
        self.started_by_rule = 0
        self.tally.machines += 1

    def live_keys(self) -> list[str]:
        """The machine's unfinished instances, oldest first."""
        live = set(
            WorkflowInstance.objects.filter(key__in=self.keys)
            .exclude(status__in=TERMINAL)
            .values_list("key", flat=True)
        )
        return [key for key in self.keys if key in live]

    # What is drawn never depends on the database (which the threads make nondeterministic),
    # so hypothesis can replay and shrink a failing run.

    @initialize(fail_at=FAIL_AT)
    def first_instance(self, fail_at: str | None) -> None:
        self.start(fail_at)

    @precondition(lambda self: self.started_by_rule < MAX_INSTANCES)
    @rule(fail_at=FAIL_AT)
    def start_another(self, fail_at: str | None) -> None:
        self.started_by_rule += 1
        self.start(fail_at)

    def start(self, fail_at: str | None) -> str:
        key = f"race-{next(_keys)}"
        with bells.suppressed():
            workerflow.start(self.definition, key=key, input={"fail_at": fail_at})
        self.keys.append(key)
        return key

    @rule(
        choice=st.integers(0, MAX_INSTANCES - 1),
        fail_at=FAIL_AT,
        plan=st.lists(
            st.tuples(st.sampled_from(OPERATIONS), st.sampled_from([0.0, 0.0005, 0.002])),
            min_size=2,
            max_size=3,
        ),
    )
    def race(self, choice: int, fail_at: str | None, plan: list[tuple[str, float]]) -> None:
        """Fire ``plan``'s operations at one unfinished instance at once, and check what
        each reported against the events the instance recorded."""
        key = self.pick(choice, fail_at)
        self.fire(key, plan)

    @rule(
        choice=st.integers(0, MAX_INSTANCES - 1),
        fail_at=FAIL_AT,
        delay=st.sampled_from([0.0, 0.0005, 0.002]),
    )
    def resume_races_a_tick(self, choice: int, fail_at: str | None, delay: float) -> None:
        """Pause one unfinished instance outright, then race its resume against a tick.
        Only a running instance pauses, so the random races seldom leave one paused for a
        resume to find (one run of 25 machines reached no ``paused -> resumed``)."""
        key = self.pick(choice, fail_at)
        pk = WorkflowInstance.objects.values_list("pk", flat=True).get(key=key)
        self.perform("tick", key, pk)  # a pending instance starts running
        self.perform("pause", key, pk)
        self.fire(key, [("resume", 0.0), ("tick", delay)])

    @rule(fail_at=FAIL_AT, delay=st.sampled_from([0.0, 0.0005, 0.002]))
    def cancel_races_an_event(self, fail_at: str | None, delay: float) -> None:
        """Cancel a new instance before any tick, racing an event sent to it. The random races
        pick unfinished instances, which a tick has mostly set running, so they seldom cancel
        one still pending (one run of 25 machines reached no ``pending -> cancelled``)."""
        self.fire(self.start(fail_at), [("cancel", 0.0), ("send_event", delay)])

    @rule(
        choice=st.integers(0, MAX_INSTANCES - 1),
        fail_at=FAIL_AT,
        delay=st.sampled_from([0.0, 0.0005, 0.002]),
    )
    def cancel_of_a_paused_one_races_an_event(
        self, choice: int, fail_at: str | None, delay: float
    ) -> None:
        """Pause one unfinished instance outright, then cancel it while an event is sent to
        it: a run of 25 machines once reached no ``paused -> cancelled`` either."""
        key = self.pick(choice, fail_at)
        pk = WorkflowInstance.objects.values_list("pk", flat=True).get(key=key)
        self.perform("tick", key, pk)  # a pending instance starts running
        self.perform("pause", key, pk)
        self.fire(key, [("cancel", 0.0), ("send_event", delay)])

    def pick(self, choice: int, fail_at: str | None) -> str:
        """One of the machine's unfinished instances (a new one if all finished)."""
        live = self.live_keys() or [self.start(fail_at)]
        return live[choice % len(live)]

    def fire(self, key: str, plan: list[tuple[str, float]]) -> None:
        """Run ``plan``'s operations at ``key`` from separate threads at once; check what
        each reported against the events the instance recorded meanwhile."""
        self.tally.steps += 1
        before = Counter(
            WorkflowEvent.objects.filter(instance__key=key).values_list("type", flat=True)
        )
        pk = WorkflowInstance.objects.values_list("pk", flat=True).get(key=key)
        barrier = threading.Barrier(len(plan))

        def operation(name: str, delay: float) -> Any:
            barrier.wait(OPERATION_TIMEOUT)
            time.sleep(delay)
            return self.perform(name, key, pk)

        outcomes = in_threads(
            *[lambda n=name, d=delay: operation(n, d) for name, delay in plan],
            timeout=OPERATION_TIMEOUT,
        )
        after = Counter(
            WorkflowEvent.objects.filter(instance__key=key).values_list("type", flat=True)
        )
        added = after - before
        reported: Counter[str] = Counter()
        for (name, _), outcome in zip(plan, outcomes, strict=True):
            self.tally.operations[name] += 1
            self.tally.outcomes[f"{name}:{'same instance' if name == 'start' else outcome}"] += 1
            if outcome is True and name in ("pause", "resume", "cancel"):
                reported[{"pause": "paused", "resume": "resumed", "cancel": "cancelled"}[name]] += 1
            if name == "start":
                assert outcome == pk, f"start of {key} returned another instance"
            if name == "send_event" and outcome is True:
                self.sent[key] += 1
        if any(
            name == "send_event" and outcome is False
            for (name, _), outcome in zip(plan, outcomes, strict=True)
        ):
            # send_event returns None only to a finished instance, and finished is for good.
            status = WorkflowInstance.objects.values_list("status", flat=True).get(pk=pk)
            assert status in TERMINAL, (key, plan, outcomes, status)
        for event_type in ("paused", "resumed", "cancelled"):
            assert added[event_type] == reported[event_type], (key, plan, outcomes, added)
        assert added["created"] == 0, "a racing start created a second instance"

    def perform(self, name: str, key: str, pk: int) -> Any:
        """Run one operation; return what it reported (True/False, a pk, a tick outcome)."""
        if name == "pause":
            return workerflow.pause(key)
        if name == "resume":
            try:
                workerflow.resume(key)
            except WorkflowStateError:
                return False
            return True
        if name == "cancel":
            return workerflow.cancel(key, reason="race")
        if name == "send_event":
            return workerflow.send_event(key, "go", {"from": "race"}) is not None
        if name == "tick":
            return tick(pk).outcome
        if name == "start":
            return workerflow.start(self.definition, key=key).pk
        raise AssertionError(name)

    @invariant()
    def histories_follow_the_model(self) -> None:
        for key in self.keys:
            state, events = check_history(key, self.tally)
            status = WorkflowInstance.objects.values_list("status", flat=True).get(key=key)
            assert status == state, f"instance {key}: status {status}, history says {state}"
            check_no_step_started_while_stopped(key, events)
            check_callbacks_match_attempts(key)
            check_not_stuck(key, state)

    def teardown(self) -> None:
        """Drive every instance to a finish (nothing is left stuck), then check that every
        event sent to it was kept: claimed by one of its waits, or still queued."""
        with bells.suppressed():
            for key in self.keys:
                status, sent = drive_to_finish(key)
                self.sent[key] += sent
                self.tally.finishes[status] += 1
        for key in self.keys:
            state, events = check_history(key, self.tally)
            assert state in TERMINAL, (key, state)
            check_no_step_started_while_stopped(key, events)
            check_callbacks_match_attempts(key)
            check_events_kept(key, self.sent[key])


def check_events_kept(key: str, sent: int) -> None:
    """Each accepted event is a row, claimed by a satisfied wait of its own instance that
    holds its payload, or still queued; each satisfied wait claimed exactly one."""
    events = list(
        InboundEvent.objects.filter(instance__key=key).select_related("claimed_by", "instance")
    )
    assert len(events) == sent, f"instance {key}: {sent} events accepted, {len(events)} kept"
    for event in events:
        step = event.claimed_by
        if step is None:
            assert event.claimed_at is None, event.pk
            continue
        assert step.instance_id == event.instance_id, event.pk
        assert step.state == StepState.SATISFIED, (event.pk, step.state)
        assert step.payload == event.payload, event.pk
    satisfied = Step.objects.filter(instance__key=key, state=StepState.SATISFIED)
    claimed = {event.claimed_by_id for event in events if event.claimed_by_id}
    assert set(satisfied.values_list("pk", flat=True)) == claimed, key


def drive_to_finish(key: str) -> tuple[str, int]:
    """Resume, send events and tick until the instance finishes (bounded); return its
    final status and how many events it accepted meanwhile."""
    instance = WorkflowInstance.objects.get(key=key)
    sent = 0
    for _ in range(4 * ROUNDS + 4):
        instance.refresh_from_db()
        if instance.is_terminal:
            return instance.status, sent
        if instance.status == "paused":
            workerflow.resume(instance)
        if not Step.objects.filter(
            instance=instance, type=StepType.WAIT, state=StepState.WAITING
        ).exists():
            tick(instance.pk)
            continue
        sent += workerflow.send_event(instance, "go", {"from": "teardown"}) is not None
        tick(instance.pk)
    instance.refresh_from_db()
    raise AssertionError(f"instance {key} did not finish: {instance.status}")


@pytest.mark.slow  # seconds of real processes or real time: `make test-fast` leaves it out
def test_control_races__histories_follow_the_status_model_and_nothing_runs_after_the_end(
    transactional_db, define, quiet_engine_logs
):
    ControlRaces.definition = define(racing_workflow)
    ControlRaces.tally = tally = Tally()
    allowed = {(state, event) for state, events in MODEL.items() for event in events}
    # A fresh random seed each run, so that CI explores new interleavings over time; thread
    # timing makes a run unrepeatable anyway. On failure hypothesis prints the plan it ran.
    # A batch that happened to miss a kind of transition (a cancel never landing on a running
    # instance, say) is followed by another, up to BATCHES: the check below is on what the
    # races reached, not on one batch's luck.
    for _ in range(BATCHES):
        run_state_machine_as_test(
            ControlRaces,
            settings=settings(
                max_examples=25,
                stateful_step_count=15,
                deadline=None,
                database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
            ),
        )
        if tally.transition_kinds >= allowed:
            break

    print_figures(
        f"control races ({connection.vendor})",
        machines_run=tally.machines,
        race_steps=tally.steps,
        operations=sum(tally.operations.values()),
        transitions_checked=tally.transitions_checked,
        transition_kinds=len(tally.transition_kinds),
        finishes=dict(tally.finishes),
    )
    print(f"[reliability] control races outcomes: {dict(sorted(tally.outcomes.items()))}")
    print(
        f"[reliability] control races transitions seen: {sorted(tally.transition_kinds, key=str)}"
    )
    # Not vacuous: the interleavings reached every kind of transition the model allows.
    assert tally.transition_kinds == allowed, allowed - tally.transition_kinds
