"""Everything the instance page shows, read in a fixed number of queries."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django_workerflow.console.describe import (
    OPEN_STATES,
    cancel_reason_of,
    pretty_json,
    waiting_on,
)
from django_workerflow.console.steptree import StepNode, step_tree
from django_workerflow.console.timeline import Timeline, build_timeline
from django_workerflow.definition import sensitive
from django_workerflow.models import (
    InboundEvent,
    Step,
    StepEvent,
    WorkflowEvent,
    WorkflowEventType,
    WorkflowInstance,
    WorkflowStatus,
)
from django_workerflow.values.masking import Masker

# Steps shown on one page; an instance with more says how many it leaves out.
MAX_STEPS = 500
# Step events listed on the page (the newest ones); each step's own attempts are always shown.
MAX_STEP_EVENTS = 300
MAX_INBOUND_EVENTS = 300


@dataclass(frozen=True, slots=True)
class StepEventGroup:
    """The listed events of one step, oldest first, shown folded under the step's id."""

    node: StepNode
    events: list[StepEvent]

    @property
    def last(self) -> StepEvent:
        return self.events[-1]


@dataclass(slots=True)
class History:
    """An instance's steps, events and timeline, ready for a template or a terminal."""

    instance: WorkflowInstance
    waiting_on: str
    nodes: list[StepNode]
    step_count: int
    step_events: list[StepEvent]
    step_event_count: int
    workflow_events: list[WorkflowEvent]
    inbound_events: list[InboundEvent]
    inbound_event_count: int
    timeline: Timeline
    #: Masks the sensitive values shown (it hides nothing for a reader allowed to see them).
    masker: Masker = sensitive.REVEALED

    @property
    def step_event_groups(self) -> list[StepEventGroup]:
        """The listed step events grouped by step, in the steps table's order: each group
        is folded on the page, so the events do not repeat the steps table at length."""
        # By identity: a derived event has no primary key.
        listed = {id(event) for event in self.step_events}
        groups = []
        for node in self.nodes:
            events = [event for event in node.events if id(event) in listed]
            if events:
                groups.append(StepEventGroup(node, events))
        return groups

    @property
    def completed(self) -> bool:
        """True when the instance completed, so it has a result to show."""
        return self.instance.status == WorkflowStatus.COMPLETED

    @property
    def input(self) -> Any:
        """The instance's input as shown (sensitive values masked)."""
        return self.masker.input(self.instance.input)

    @property
    def result(self) -> Any:
        """The instance's result as shown (sensitive values masked)."""
        return self.masker.result(self.instance.result)

    @property
    def error_message(self) -> str:
        """The instance's error message as shown (sensitive values masked)."""
        return self.masker.text(self.instance.error_message)

    def event_payload(self, event: InboundEvent) -> Any:
        """An inbound event's payload as shown (sensitive values masked)."""
        return self.masker.event(event.event_name, event.payload)

    @property
    def input_json(self) -> str:
        return pretty_json(self.input)

    @property
    def result_json(self) -> str:
        return pretty_json(self.result)

    @property
    def error_json(self) -> str:
        instance = self.instance
        if not instance.error_name and not instance.error_message:
            return ""
        return pretty_json({"name": instance.error_name, "message": self.error_message})


def load_history(instance: WorkflowInstance, now: datetime, *, reveal: bool = False) -> History:
    """Read the instance's history; at most ``MAX_STEPS`` steps and the newest events.

    Its sensitive values are masked in everything shown (values, errors, tracebacks and the
    timeline's labels) unless ``reveal``; the rows read are not changed.
    """
    masker = sensitive.masker_for(instance, reveal=reveal)
    steps = list(Step.objects.filter(instance=instance).order_by("created_at", "id")[:MAX_STEPS])
    step_count = len(steps)
    if step_count == MAX_STEPS:
        step_count = Step.objects.filter(instance=instance).count()
    by_pk = {step.pk: step for step in steps}
    shown = instance.step_events.all()
    if step_count > len(steps):  # the events of the steps shown only
        shown = shown.filter(step__in=list(by_pk))
    events = list(shown)
    for step_event in events:
        step_event.step = by_pk[step_event.step_id]
    nodes = step_tree(steps, events, masker)
    for step_event in events:
        # The page shows it as {{ event.error_text }}; the model has no such field.
        error = masker.text(step_event.error_message or step_event.error_name)
        step_event.error_text = error  # type: ignore[attr-defined]
    unreached = set(instance.unreached_step_ids or ())
    for node in nodes:
        is_open = node.step.state in OPEN_STATES
        node.abandoned = is_open and instance.is_terminal
        node.unreached = is_open and not instance.is_terminal and node.step.step_id in unreached
    workflow_events = list(instance.workflow_events.order_by("recorded_at", "id"))
    # Set like the change list's prefetch (to_attr) does, for cancel_reason_of to read.
    instance.cancel_events = [  # type: ignore[attr-defined]
        event for event in workflow_events if event.type == WorkflowEventType.CANCELLED
    ]
    inbound = instance.inbound_events.select_related("claimed_by").order_by("-created_at", "-id")
    inbound_events = list(inbound[:MAX_INBOUND_EVENTS])
    for event in inbound_events:
        # The page shows it as {{ event.payload_json }}; the model has no such field.
        shown = masker.event(event.event_name, event.payload)
        event.payload_json = pretty_json(shown)  # type: ignore[attr-defined]
    newest_events = events[-MAX_STEP_EVENTS:]
    return History(
        instance=instance,
        waiting_on=masker.text(
            waiting_on(instance, steps, now, cancel_reason=cancel_reason_of(instance), limit=None)
        ),
        nodes=nodes,
        step_count=step_count,
        step_events=list(reversed(newest_events)),
        step_event_count=len(events),
        workflow_events=workflow_events,
        inbound_events=inbound_events,
        inbound_event_count=len(inbound_events)
        if len(inbound_events) < MAX_INBOUND_EVENTS
        else instance.inbound_events.count(),
        timeline=build_timeline(instance, nodes, workflow_events, now),
        masker=masker,
    )
