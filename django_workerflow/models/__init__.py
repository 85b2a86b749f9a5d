"""The engine's tables, and the instance's transitions.

Each transition of an instance is one method of :class:`WorkflowInstance` that writes
exactly its fields and records its :class:`WorkflowEvent`; only the runtime, the tick and
the lease call them, under the instance's row lock. The step store writes steps.
"""

from ..states import (
    ACTIVE_STATUSES,
    TERMINAL_STATUSES,
    StepEventType,
    StepState,
    StepType,
    WorkflowEventType,
    WorkflowStatus,
)
from .delivery import FinishDelivery
from .fields import JSONTextField
from .flow import AdmissionGate, WorkflowSchedule
from .heartbeat import WorkerHeartbeat
from .history import InboundEvent, Step, StepEvent, WorkflowEvent
from .instance import WorkflowInstance, WorkflowInstanceQuerySet

__all__ = [
    "ACTIVE_STATUSES",
    "TERMINAL_STATUSES",
    "AdmissionGate",
    "FinishDelivery",
    "InboundEvent",
    "JSONTextField",
    "Step",
    "StepEvent",
    "StepEventType",
    "StepState",
    "StepType",
    "WorkerHeartbeat",
    "WorkflowEvent",
    "WorkflowEventType",
    "WorkflowInstance",
    "WorkflowInstanceQuerySet",
    "WorkflowSchedule",
    "WorkflowStatus",
]
