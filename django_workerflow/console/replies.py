"""How the console answers an operator: a confirmation page before an operation that takes
input, and after any operation its report, as a message and as entries in the admin history.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import django
from django import forms
from django.contrib import messages
from django.contrib.admin import ModelAdmin, helpers
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from django_workerflow.console.controls import CONTROLS, ControlName, admin_url
from django_workerflow.console.operations import Report
from django_workerflow.models import WorkflowInstance

TITLES = {
    ControlName.CANCEL: "Cancel workflows",
    ControlName.SEND_EVENT: "Send an event",
    ControlName.RETRY: "Retry failed workflows",
    ControlName.FORK: "Fork a workflow",
}
SUBMIT_LABELS = {
    ControlName.CANCEL: "Yes, cancel",
    ControlName.SEND_EVENT: "Send event",
    ControlName.RETRY: "Yes, retry",
    ControlName.FORK: "Fork",
}


def record(model_admin: ModelAdmin[WorkflowInstance], request: HttpRequest, report: Report) -> None:
    """Log each change in the admin history and tell the user what happened."""
    for outcome in report.done:
        model_admin.log_change(request, outcome.instance, outcome.detail)
    clean = report.done and not report.skipped and not report.warnings
    level = messages.SUCCESS if clean else messages.WARNING
    model_admin.message_user(request, report.summary(), level)


def confirmation_page(
    model_admin: ModelAdmin[WorkflowInstance],
    request: HttpRequest,
    control: ControlName,
    form: forms.Form,
    instances: list[WorkflowInstance],
    *,
    action: str = "",
) -> HttpResponse:
    """The form page of cancel and send event, for a selection (the list ``action`` that
    posts it back) or for one instance (no action)."""
    statuses = CONTROLS[control].statuses
    # Django's own field markup for this version (it changed in 6.0), and its breadcrumbs.
    fieldsets = [(None, {"fields": list(form.fields)})]
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "title": TITLES[control],
        "control": control,
        "form": form,
        # AdminForm renders any form; the stubs only say ModelForm.
        "adminform": helpers.AdminForm(form, fieldsets, {}),  # type: ignore[arg-type]
        "breadcrumbs_as_list": django.VERSION >= (6, 0),
        "instances": instances,
        "skipped": [i for i in instances if i.status not in statuses],
        "action": action,
        "submit_label": SUBMIT_LABELS[control],
        "back_url": admin_url(model_admin, "change", instances[0].pk)
        if not action
        else admin_url(model_admin, "changelist"),
    }
    request.current_app = model_admin.admin_site.name
    return TemplateResponse(request, "workerflow/admin/action_form.html", context)


def submitted(request: HttpRequest) -> Any:
    """The POSTed data when the confirmation page was submitted, else None (a first visit)."""
    return request.POST if "apply" in request.POST else None


def confirm_then_apply(
    model_admin: ModelAdmin[WorkflowInstance],
    request: HttpRequest,
    instances: list[WorkflowInstance],
    form: forms.Form,
    control: ControlName,
    action: str,
    apply: Callable[[dict[str, Any]], Report],
) -> HttpResponse | None:
    """A list action that takes input: with a valid submitted form, apply it and report;
    otherwise show (again) the confirmation page of the selection."""
    if form.is_valid():
        record(model_admin, request, apply(form.cleaned_data))
        return None
    return confirmation_page(model_admin, request, control, form, instances, action=action)
