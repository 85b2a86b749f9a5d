"""factory-boy factories for engine rows, for states that are awkward to reach publicly.

Every timestamp defaults to the engine's clock (:func:`django_workerflow.values.clock.now`), so rows
built under the test harness carry virtual time like the rows the engine writes itself.
These factories write rows directly: they bypass the runtime, so they arm no alarm and send
no signal. Prefer the public API where a state is reachable through it.
"""

from __future__ import annotations

from datetime import timedelta

import factory
from factory.django import DjangoModelFactory

from django_workerflow.models import (
    InboundEvent,
    Step,
    StepEventType,
    StepState,
    StepType,
    StoredStepEvent,
    WorkflowEvent,
    WorkflowEventType,
    WorkflowInstance,
    WorkflowStatus,
)
from django_workerflow.values import clock

DEFAULT_DEFINITION_NAME = "test-workflow"
DEFAULT_DEFINITION_VERSION = "2026-03-19"


class WorkflowInstanceFactory(DjangoModelFactory):
    """A pending instance with no lease and no alarm.

    Pass ``definition=SomeDefinitionClass`` to take its name and version, or set
    ``definition_name`` / ``definition_version`` directly.
    """

    class Meta:
        model = WorkflowInstance

    class Params:
        definition = None

    key = factory.Sequence(lambda n: f"instance-{n}")
    definition_name = factory.LazyAttribute(
        lambda o: o.definition.name if o.definition else DEFAULT_DEFINITION_NAME
    )
    definition_version = factory.LazyAttribute(
        lambda o: o.definition.version if o.definition else DEFAULT_DEFINITION_VERSION
    )
    input = None
    status = WorkflowStatus.PENDING
    alarm_at = None
    lease_token = None
    lease_expires_at = None
    created_at = factory.LazyFunction(clock.now)
    updated_at = factory.SelfAttribute("created_at")


class StepFactory(DjangoModelFactory):
    """A pending run step with no attempt yet (3 attempts allowed).

    Traits: ``sleep=True`` (a waiting sleep that wakes in a minute) and ``wait=True`` (a
    waiting wait for ``event-1`` without a deadline). With a ``parent`` step the new step
    belongs to the parent's instance.
    """

    class Meta:
        model = Step

    class Params:
        sleep = factory.Trait(
            type=StepType.SLEEP,
            state=StepState.WAITING,
            max_attempts=None,
            wake_at=factory.LazyAttribute(lambda o: o.created_at + timedelta(minutes=1)),
        )
        wait = factory.Trait(
            type=StepType.WAIT,
            state=StepState.WAITING,
            max_attempts=None,
            event_name="event-1",
        )

    parent = None
    instance = factory.Maybe(
        "parent",
        yes_declaration=factory.SelfAttribute("parent.instance"),
        no_declaration=factory.SubFactory(WorkflowInstanceFactory),
    )
    step_id = factory.Sequence(lambda n: f"step-{n}")
    type = StepType.RUN
    state = StepState.PENDING
    attempt_count = 0
    max_attempts = 3
    created_at = factory.LazyFunction(clock.now)


class StepEventFactory(DjangoModelFactory):
    """An ``attempt_started`` event for attempt 1 of a new run step."""

    class Meta:
        model = StoredStepEvent

    step = factory.SubFactory(StepFactory)
    instance = factory.SelfAttribute("step.instance")
    type = StepEventType.ATTEMPT_STARTED
    attempt_number = 1
    recorded_at = factory.LazyFunction(clock.now)


class WorkflowEventFactory(DjangoModelFactory):
    """A ``created`` lifecycle event without a reason."""

    class Meta:
        model = WorkflowEvent

    instance = factory.SubFactory(WorkflowInstanceFactory)
    type = WorkflowEventType.CREATED
    reason = None
    recorded_at = factory.LazyFunction(clock.now)


class InboundEventFactory(DjangoModelFactory):
    """A queued (unclaimed) ``event-1`` with a null payload."""

    class Meta:
        model = InboundEvent

    instance = factory.SubFactory(WorkflowInstanceFactory)
    event_name = "event-1"
    payload = None
    created_at = factory.LazyFunction(clock.now)
    claimed_by = None
    claimed_at = None
