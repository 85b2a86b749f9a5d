"""The change list's actions: each filters the selection, calls the console's operations and
reports what it did.

Each action names the permission it needs; Django offers it only to users who hold it, and
:func:`refuse_unpermitted` turns a posted action the user may not run into a 403.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

from django.contrib import admin, messages
from django.contrib.admin import ModelAdmin
from django.contrib.admin.actions import delete_selected as django_delete_selected
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse

from django_workerflow.console import operations
from django_workerflow.console.controls import ControlName
from django_workerflow.console.forms import CancelForm, SendEventForm, awaited_event_initial
from django_workerflow.console.replies import confirm_then_apply, record, submitted
from django_workerflow.models import (
    TERMINAL_STATUSES,
    InboundEvent,
    Step,
    StepEvent,
    WorkflowEvent,
    WorkflowInstance,
)

if TYPE_CHECKING:  # ModelAdmin is generic for type checkers only
    InstanceAdmin: TypeAlias = ModelAdmin[WorkflowInstance]
Instances: TypeAlias = QuerySet[WorkflowInstance]


@admin.action(permissions=["pause"], description="Pause selected workflows")
def pause_selected(model_admin: InstanceAdmin, request: HttpRequest, queryset: Instances) -> None:
    record(model_admin, request, operations.pause(queryset.order_by("pk")))


@admin.action(permissions=["resume"], description="Resume selected workflows")
def resume_selected(model_admin: InstanceAdmin, request: HttpRequest, queryset: Instances) -> None:
    record(model_admin, request, operations.resume(queryset.order_by("pk")))


@admin.action(permissions=["resume"], description="Wake selected workflows now")
def wake_now(model_admin: InstanceAdmin, request: HttpRequest, queryset: Instances) -> None:
    record(model_admin, request, operations.wake(queryset.order_by("pk")))


@admin.action(permissions=["cancel"], description="Cancel selected workflows…")
def cancel_selected(
    model_admin: InstanceAdmin, request: HttpRequest, queryset: Instances
) -> HttpResponse | None:
    return confirm_then_apply(
        model_admin,
        request,
        list(queryset),
        CancelForm(submitted(request)),
        ControlName.CANCEL,
        "cancel_selected",
        lambda data: operations.cancel(queryset.order_by("pk"), data["reason"]),
    )


@admin.action(permissions=["send_event"], description="Send an event to selected workflows…")
def send_event(
    model_admin: InstanceAdmin, request: HttpRequest, queryset: Instances
) -> HttpResponse | None:
    return confirm_then_apply(
        model_admin,
        request,
        list(queryset),
        SendEventForm(submitted(request), initial=awaited_event_initial(queryset)),
        ControlName.SEND_EVENT,
        "send_event",
        lambda data: operations.send_event(
            queryset.order_by("pk"), data["event_name"], data["payload"], data["idempotency_key"]
        ),
    )


@admin.action(permissions=["delete"], description="Delete selected finished workflows")
def delete_selected(
    model_admin: InstanceAdmin, request: HttpRequest, queryset: Instances
) -> HttpResponse | None:
    """Django's delete action, limited to finished instances."""
    unfinished = queryset.exclude(status__in=TERMINAL_STATUSES).count()
    if unfinished and "post" not in request.POST:
        model_admin.message_user(
            request,
            f"{unfinished} skipped: not finished (only completed, failed or cancelled "
            "workflows can be deleted; cancel them first).",
            messages.WARNING,
        )
    finished = queryset.filter(status__in=TERMINAL_STATUSES)
    if not finished.exists():
        return None
    return django_delete_selected(model_admin, request, finished)


def deletion_summary(
    model_admin: InstanceAdmin, objs: Any, request: HttpRequest
) -> tuple[Any, ...]:
    """What ``get_deleted_objects`` returns, summarising the rows a deletion removes by model
    instead of listing every step event."""
    instances = list(objs)
    pks = [instance.pk for instance in instances]
    counts = {model_admin.opts.verbose_name_plural: len(instances)}
    for model in (Step, StepEvent, WorkflowEvent, InboundEvent):
        count = model.objects.filter(instance_id__in=pks).count()
        if count:
            counts[model._meta.verbose_name_plural] = count
    refused = [i for i in instances if not model_admin.has_delete_permission(request, i)]
    perms_needed = {model_admin.opts.verbose_name} if refused else set()
    return [str(instance) for instance in instances], counts, perms_needed, []


def refuse_unpermitted(model_admin: InstanceAdmin, request: HttpRequest) -> None:
    """Refuse (403) a posted action the user may not run, rather than report it as "no
    action selected" like an empty choice."""
    names = request.POST.getlist("action")
    try:
        name = names[int(request.POST.get("index", 0))]
    except (IndexError, ValueError):
        name = names[0] if names else ""
    if name and name not in model_admin.get_actions(request):
        raise PermissionDenied
