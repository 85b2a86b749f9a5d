"""The buttons of the instance page: what each says, who may press it, when it applies, and
the URL names the console's pages are reached by.

A control's permission is checked through the model admin's ``has_<permission>_permission``
method, the same method Django asks before it offers a list action.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from django.contrib.admin import ModelAdmin
from django.http import HttpRequest
from django.urls import reverse

from django_workerflow.models import ACTIVE_STATUSES, WorkflowInstance, WorkflowStatus

UNFINISHED = frozenset(ACTIVE_STATUSES | {WorkflowStatus.PAUSED})


class ControlName(StrEnum):
    """The controls of the instance page; each is also the last part of its URL and URL name."""

    PAUSE = "pause"
    RESUME = "resume"
    WAKE = "wake"
    SEND_EVENT = "send_event"
    CANCEL = "cancel"
    RETRY = "retry"
    FORK = "fork"


@dataclass(frozen=True, slots=True)
class Control:
    """A button of the instance page: what it says, the permission it needs (the codename
    prefix of ``<prefix>_workflowinstance``), the statuses it applies to, and whether it
    opens a form first (otherwise it is a one-click POST)."""

    label: str
    permission: str
    statuses: frozenset[str]
    form: bool = False


CONTROLS = {
    ControlName.PAUSE: Control("Pause", "pause", frozenset({WorkflowStatus.RUNNING})),
    ControlName.RESUME: Control("Resume", "resume", frozenset({WorkflowStatus.PAUSED})),
    # Waking re-drives an instance: the same power as resuming one.
    ControlName.WAKE: Control("Wake now", "resume", frozenset(ACTIVE_STATUSES)),
    ControlName.SEND_EVENT: Control("Send event…", "send_event", UNFINISHED, form=True),
    ControlName.CANCEL: Control("Cancel…", "cancel", UNFINISHED, form=True),
    ControlName.RETRY: Control("Retry", "retry", frozenset({WorkflowStatus.FAILED}), form=True),
    # Any instance can be forked: a failed or stuck one onto fixed code, a finished one anew.
    ControlName.FORK: Control("Fork…", "fork", frozenset(WorkflowStatus.values), form=True),
}


def may_use(
    model_admin: ModelAdmin[WorkflowInstance], request: HttpRequest, name: ControlName
) -> bool:
    """True when the user holds the permission the control needs."""
    has_permission = getattr(model_admin, f"has_{CONTROLS[name].permission}_permission")
    return bool(has_permission(request))


def buttons(
    model_admin: ModelAdmin[WorkflowInstance], request: HttpRequest, instance: WorkflowInstance
) -> list[dict[str, Any]]:
    """The buttons the user may press on this instance now."""
    return [
        {
            "name": name,
            "label": control.label,
            "url": admin_url(model_admin, name, instance.pk),
            "post": not control.form,
        }
        for name, control in CONTROLS.items()
        if instance.status in control.statuses and may_use(model_admin, request, name)
    ]


def url_name(model_admin: ModelAdmin[WorkflowInstance], name: str) -> str:
    """The URL name of one of the model admin's pages ("change", or a control's name)."""
    return f"{model_admin.opts.app_label}_{model_admin.opts.model_name}_{name}"


def admin_url(model_admin: ModelAdmin[WorkflowInstance], name: str, *args: Any) -> str:
    """The URL of one of the model admin's pages on its admin site."""
    return reverse(f"{model_admin.admin_site.name}:{url_name(model_admin, name)}", args=args)
