"""The replay verdict in the console: on the instance page, as a list filter, and the bulk
"Fork onto the current version…" action for stranded instances.

The instance page judges its one instance fresh (:func:`django_workerflow.replay_verdict`).
The filter reads only the stored verdicts (:mod:`django_workerflow.deploy.verdicts`): an
indexed join, never a replay per page load; a verdict stored for other code than this
process's is "not checked yet". The fork action judges each selected instance fresh, forks
those the current code cannot replay onto the registered default version (keeping their
settled steps before the first step that breaks), and skips the others.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from django import forms
from django.contrib import admin
from django.contrib.admin import ModelAdmin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse

from django_workerflow.console.controls import ControlName
from django_workerflow.console.operations import Report
from django_workerflow.console.replies import confirm_then_apply, submitted
from django_workerflow.console.rerun_requests import ForkRequest, fork
from django_workerflow.deploy import verdicts
from django_workerflow.deploy.replay import ProblemKind, ReplayReport
from django_workerflow.deploy.replay_check import CHECKED_STATUSES, CheckFilter, check_instances
from django_workerflow.models import Step, WorkflowInstance, WorkflowStatus

if TYPE_CHECKING:  # ModelAdmin is generic for type checkers only
    InstanceAdmin: TypeAlias = ModelAdmin[WorkflowInstance]
Instances: TypeAlias = QuerySet[WorkflowInstance]

#: The change list's parameter of :class:`ReplayVerdictFilter`.
PARAMETER = "replays"


class ReplayVerdictFilter(admin.SimpleListFilter):
    """ "Replays on current code": yes, no (stranded) or not checked yet, by the stored
    verdicts current for this process's code; finished instances are in none of them."""

    title = "replays on current code"
    parameter_name = PARAMETER

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            (verdicts.VerdictState.REPLAYS, "yes"),
            (verdicts.VerdictState.STRANDED, "no (stranded)"),
            (verdicts.VerdictState.UNCHECKED, "not checked yet"),
        ]

    def queryset(self, request: HttpRequest, queryset: Instances) -> Instances:
        value = self.value()
        if value not in verdicts.VerdictState.values:
            return queryset
        return verdicts.with_state(queryset, verdicts.VerdictState(value))


@dataclass(frozen=True, slots=True)
class PageVerdict:
    """The instance page's line: ``judged`` is False for an instance with nothing left to
    replay (completed or cancelled)."""

    judged: bool
    ok: bool
    reason: str


def page_verdict(instance: WorkflowInstance) -> PageVerdict:
    """Judge the instance fresh, as ``check-replay`` would now."""
    if instance.status not in (*CHECKED_STATUSES, WorkflowStatus.FAILED):
        return PageVerdict(judged=False, ok=True, reason="")
    verdict = verdicts.replay_verdict(instance)
    return PageVerdict(judged=True, ok=verdict.ok, reason=verdict.reason)


class ForkOntoCurrentForm(forms.Form):
    """Confirm a bulk fork of stranded instances, with a reason recorded on both instances."""

    reason = forms.CharField(
        required=False,
        max_length=1000,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        help_text="Recorded on each source and its fork, and in the admin history.",
    )

    def clean_reason(self) -> str | None:
        return self.cleaned_data["reason"].strip() or None


INTRO = (
    "Each selected workflow that the code now deployed cannot replay is forked onto the "
    "registered default version: the fork keeps the settled steps recorded before the first "
    "step the code breaks on, and runs the rest anew. The source is left as it is (cancel it "
    "once the fork runs). Workflows that replay on the current code are skipped."
)


@admin.action(permissions=["fork"], description="Fork stranded workflows onto the current version…")
def fork_onto_current(
    model_admin: InstanceAdmin, request: HttpRequest, queryset: Instances
) -> HttpResponse | None:
    response = confirm_then_apply(
        model_admin,
        request,
        list(queryset),
        ForkOntoCurrentForm(submitted(request)),
        ControlName.FORK,
        "fork_onto_current",
        lambda data: fork_stranded(queryset.order_by("pk"), data["reason"]),
    )
    if response is not None:
        context = response.context_data  # type: ignore[attr-defined]  # a TemplateResponse
        context["title"] = "Fork stranded workflows onto the current version"
        context["intro"] = INTRO
        context["submit_label"] = "Yes, fork"
    return response


def fork_stranded(instances: Instances, reason: str | None) -> Report:
    """Fork each instance of ``instances`` the current code cannot replay onto the default
    version, from its first breaking step that is recorded (else keeping every settled step);
    skip the others, saying why."""
    report = Report()
    for instance in instances:
        found = list(check_instances(CheckFilter(key=instance.key, include_failed=True)))
        if not found:
            report.add(instance, False, f"already {instance.status}")
            continue
        _, replay = found[0]
        if verdicts.verdict_of(replay).ok:
            report.add(instance, False, "replays on the current code")
            continue
        forked, _ = fork(
            instance, ForkRequest(from_step=first_break(instance, replay), reason=reason)
        )
        report.entries.extend(forked.entries)
    return report


def first_break(instance: WorkflowInstance, replay: ReplayReport) -> str | None:
    """The recorded step a fork onto the current code runs anew from: the step the first
    breaking problem names if it is recorded (a step reached as another kind), the recorded
    step a new step takes the place of (a rename), else None (keep every settled step)."""
    recorded = set(Step.objects.filter(instance_id=instance.pk).values_list("step_id", flat=True))
    for problem in replay.breaking():
        if problem.kind == ProblemKind.NEW_STEP and replay.displaced_step in recorded:
            return replay.displaced_step
        if problem.step_id in recorded:
            return problem.step_id
    return None
