"""The few lines an instance page opens with: status, what it waits on, key times, its
timeout's deadline, and what needs an operator's eye (a definition no worker has, steps a
changed definition no longer reaches, tracebacks).

The change list's "waiting on" column and ``manage.py workerflow show`` read the same words.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django_workerflow.console.describe import missing_definition, timeout_words
from django_workerflow.console.history import History
from django_workerflow.console.progress import progress_bar
from django_workerflow.console.time_words import format_when
from django_workerflow.definition import drift
from django_workerflow.models import StepEventType, WorkflowInstance


@dataclass(frozen=True, slots=True)
class Traceback:
    """A formatted traceback and the failure it belongs to ("Attempt 2 of step 'charge'")."""

    title: str
    text: str


@dataclass(slots=True)
class Summary:
    """What the top of the instance page says; empty strings are not shown."""

    instance: WorkflowInstance
    waiting_on: str
    outcome: str
    missing_definition: str
    times: list[tuple[str, str]]
    unreached_step_ids: list[str] = field(default_factory=list)
    tracebacks: list[Traceback] = field(default_factory=list)
    # The instances forked from this one, oldest first (a few at most are shown).
    forks: list[WorkflowInstance] = field(default_factory=list)
    # The last progress reported, as a bar with its text (HTML; "" for none).
    progress: str = ""
    # The instance's timeout and its deadline, or what is left while paused ("" for none).
    timeout: str = ""

    @property
    def unreached_warning(self) -> str:
        if not self.unreached_step_ids:
            return ""
        return (
            f"{len(self.unreached_step_ids)} recorded step"
            f"{'s' if len(self.unreached_step_ids) != 1 else ''} the current definition no "
            "longer reaches: the definition changed under this instance. Their outcomes are "
            "kept but unused; fork the instance onto a version that fits, or let it finish."
        )


MAX_FORKS = 10

MISSING_DEFINITION_HINT = (
    f"Its instances wait untouched until a worker has it: {drift.DEFINITIONS_HINT}. Or fork "
    "the instance onto a registered version."
)


def build_summary(history: History, now: datetime) -> Summary:
    """The summary of ``history``'s instance at ``now``."""
    instance = history.instance
    times = [("Created", format_when(instance.created_at, now))]
    if instance.finished_at:
        times.append((f"{instance.get_status_display()}", format_when(instance.finished_at, now)))
    else:
        times.append(("Updated", format_when(instance.updated_at, now)))
        if instance.alarm_at:
            times.append(("Next alarm", format_when(instance.alarm_at, now)))
        if instance.lease_token and instance.lease_expires_at:
            held = format_when(instance.lease_expires_at, now)
            times.append(("Worker lease", f"held until {held}"))
    missing = missing_definition(instance)
    return Summary(
        instance=instance,
        # What describe.waiting_on says: the missing definition (shown as a warning instead),
        # the steps an unfinished instance waits on, or how a finished one ended.
        waiting_on="" if instance.is_terminal or missing else history.waiting_on,
        outcome=history.waiting_on if instance.is_terminal else "",
        missing_definition=missing,
        times=times,
        unreached_step_ids=list(instance.unreached_step_ids or []),
        tracebacks=tracebacks(history),
        forks=list(instance.forks.only("id", "key").order_by("created_at", "id")[:MAX_FORKS]),
        progress=progress_bar(instance.progress),
        timeout=timeout_words(instance, now),
    )


def tracebacks(history: History) -> list[Traceback]:
    """The instance's traceback, then each failed attempt's, newest first."""
    found = []
    mask = history.masker.text
    if history.instance.error_traceback:
        found.append(Traceback("The workflow's failure", mask(history.instance.error_traceback)))
    for event in history.step_events:
        if event.type == StepEventType.ATTEMPT_FAILED and event.traceback:
            title = f"Attempt {event.attempt_number} of step '{event.step.step_id}'"
            found.append(Traceback(title, mask(event.traceback)))
    return found
