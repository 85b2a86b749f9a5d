"""The engine's tables, and the instance's transitions.

Each transition of an instance is one method of :class:`WorkflowInstance` that writes
exactly its fields and records its :class:`WorkflowEvent`; only the runtime, the tick and
the lease call them, under the instance's row lock. The step store writes steps.
"""

from django_workerflow.models.delivery import FinishDelivery
from django_workerflow.models.fields import JSONTextField
from django_workerflow.models.flow import AdmissionGate, WorkflowSchedule
from django_workerflow.models.flushed_totals import ProcessMetrics
from django_workerflow.models.heartbeat import WorkerHeartbeat
from django_workerflow.models.history import (
    WAKE_LAG,
    WAKE_LAG_SINCE,
    InboundEvent,
    Step,
    StepEvent,
    StoredStepEvent,
    WorkflowEvent,
    step_events_of,
)
from django_workerflow.models.instance import WorkflowInstance, WorkflowInstanceQuerySet
from django_workerflow.models.pauses import DefinitionPause, DefinitionPauseRecord
from django_workerflow.models.verdicts import ReplayVerdictRecord
from django_workerflow.values.states import (
    ACTIVE_STATUSES,
    TERMINAL_STATUSES,
    StepEventType,
    StepState,
    StepType,
    WorkflowEventType,
    WorkflowStatus,
)

__all__ = [
    "ACTIVE_STATUSES",
    "TERMINAL_STATUSES",
    "WAKE_LAG",
    "WAKE_LAG_SINCE",
    "AdmissionGate",
    "DefinitionPause",
    "DefinitionPauseRecord",
    "FinishDelivery",
    "InboundEvent",
    "JSONTextField",
    "ProcessMetrics",
    "ReplayVerdictRecord",
    "Step",
    "StepEvent",
    "StepEventType",
    "StepState",
    "StepType",
    "StoredStepEvent",
    "WorkerHeartbeat",
    "WorkflowEvent",
    "WorkflowEventType",
    "WorkflowInstance",
    "WorkflowInstanceQuerySet",
    "WorkflowSchedule",
    "WorkflowStatus",
    "step_events_of",
]
