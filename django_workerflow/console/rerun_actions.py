"""The change list's "Retry" and "Fork…" actions.

Retry confirms with a reason, then retries the failed instances of the selection and skips
the rest. A fork is made from one instance's steps, so "Fork…" opens that instance's fork
page, and asks for a single selection otherwise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

from django.contrib import admin, messages
from django.contrib.admin import ModelAdmin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect

from django_workerflow.console import rerun_requests
from django_workerflow.console.controls import ControlName, admin_url
from django_workerflow.console.replies import confirm_then_apply, submitted
from django_workerflow.console.rerun_forms import RetryForm
from django_workerflow.models import WorkflowInstance

if TYPE_CHECKING:  # ModelAdmin is generic for type checkers only
    InstanceAdmin: TypeAlias = ModelAdmin[WorkflowInstance]
Instances: TypeAlias = QuerySet[WorkflowInstance]


@admin.action(permissions=["retry"], description="Retry selected failed workflows…")
def retry_selected(
    model_admin: InstanceAdmin, request: HttpRequest, queryset: Instances
) -> HttpResponse | None:
    selected = list(queryset)
    form = RetryForm(submitted(request), instances=selected)
    return confirm_then_apply(
        model_admin,
        request,
        selected,
        form,
        ControlName.RETRY,
        "retry_selected",
        lambda data: rerun_requests.retry(
            queryset.order_by("pk"), data["reason"], with_children=form.with_children
        ),
    )


@admin.action(permissions=["fork"], description="Fork the selected workflow…")
def fork_selected(
    model_admin: InstanceAdmin, request: HttpRequest, queryset: Instances
) -> HttpResponse | None:
    selected = list(queryset[:2])
    if len(selected) != 1:
        model_admin.message_user(
            request,
            "A fork is made from one workflow's steps: select exactly one workflow to fork.",
            messages.WARNING,
        )
        return None
    return HttpResponseRedirect(admin_url(model_admin, ControlName.FORK, selected[0].pk))
