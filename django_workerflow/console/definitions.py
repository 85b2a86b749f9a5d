"""The definitions page (Workflows, then Definitions): every registered definition with its
versions, its instances by status and whether it is paused, with pause and resume.

Seeing the page needs the view permission on instances; pausing and resuming need
``workerflow.pause_definition`` (:data:`PERMISSION`). Every pause and resume goes through
:mod:`django_workerflow.runtime.definition_pauses`, which records who, when and why; the
page shows the latest records, and the admin lists them all (Definition pause records).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import django
from django import forms
from django.contrib import admin, messages
from django.contrib.admin import ModelAdmin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.views.decorators.http import require_POST

from django_workerflow import registry
from django_workerflow.console.overview import counts_by_status
from django_workerflow.console.time_words import format_when
from django_workerflow.exceptions import WorkerflowError
from django_workerflow.models import (
    DefinitionPause,
    DefinitionPauseRecord,
    WorkflowInstance,
    WorkflowStatus,
)
from django_workerflow.runtime import definition_pauses
from django_workerflow.store import definition_pauses as pause_rows
from django_workerflow.values.clock import now as clock_now

if TYPE_CHECKING:  # ModelAdmin is generic for type checkers only
    RecordAdminBase: TypeAlias = ModelAdmin[DefinitionPauseRecord]
else:
    RecordAdminBase = ModelAdmin

#: The name of the page's URL in the admin's namespace: ``admin:workerflow_definitions``.
URL_NAME = "workerflow_definitions"
#: The permission to pause and resume definitions.
PERMISSION = "workerflow.pause_definition"
#: How many pause and resume records the page shows.
RECENT_RECORDS = 20


class PauseForm(forms.Form):
    """The reason a definition is paused (required: it is recorded with who and when)."""

    reason = forms.CharField(max_length=1000, widget=forms.TextInput(attrs={"size": 40}))


class ResumeForm(forms.Form):
    """An optional reason for resuming."""

    reason = forms.CharField(max_length=1000, required=False)


@dataclass(frozen=True, slots=True)
class DefinitionRow:
    """One registered definition, as the page shows it."""

    name: str
    versions: list[str]
    counts: list[tuple[str, int, bool]]
    pause: DefinitionPause | None
    paused_since: str


def definition_rows(now: Any) -> list[DefinitionRow]:
    """Every registered definition, and any paused one no longer registered, by name."""
    counts = counts_by_status()
    paused = {pause.definition_name: pause for pause in pause_rows.all_paused()}
    rows = []
    for name in sorted({*registry.names(), *paused}):
        pause = paused.get(name)
        by_status = counts.get(name, {})
        rows.append(
            DefinitionRow(
                name,
                registry.versions(name),
                [(s.label, *by_status.get(s.value, (0, False))) for s in WorkflowStatus],
                pause,
                format_when(pause.paused_at, now) if pause else "",
            )
        )
    return rows


class DefinitionViews:
    """The definitions page of the instance admin, with its pause and resume POSTs."""

    def __init__(self, model_admin: ModelAdmin[WorkflowInstance]) -> None:
        self.model_admin = model_admin

    def urls(self) -> list[URLPattern]:
        wrap = self.model_admin.admin_site.admin_view
        return [
            path("definitions/", wrap(self.page), name=URL_NAME),
            path("definitions/pause/", wrap(require_POST(self.pause)), name=f"{URL_NAME}_pause"),
            path("definitions/resume/", wrap(require_POST(self.resume)), name=f"{URL_NAME}_resume"),
        ]

    def page(self, request: HttpRequest) -> HttpResponse:
        if not self.model_admin.has_view_permission(request):
            raise PermissionDenied
        now = clock_now()
        context = {
            **self.model_admin.admin_site.each_context(request),
            "opts": self.model_admin.opts,
            "title": "Definitions",
            "breadcrumbs_as_list": django.VERSION >= (6, 0),
            "definitions": definition_rows(now),
            "statuses": [status.label for status in WorkflowStatus],
            "records": pause_rows.recent_records(RECENT_RECORDS),
            "may_pause": request.user.has_perm(PERMISSION),
            "pause_form": PauseForm(),
        }
        request.current_app = self.model_admin.admin_site.name
        return TemplateResponse(request, "workerflow/admin/definitions.html", context)

    def pause(self, request: HttpRequest) -> HttpResponse:
        name = self._permitted_name(request)
        form = PauseForm(request.POST)
        if not form.is_valid():
            messages.error(request, f"Definition {name!r} was not paused: give a reason.")
            return self._back()
        try:
            done = definition_pauses.pause_definition(
                name, reason=form.cleaned_data["reason"], actor=request.user.get_username()
            )
        except WorkerflowError as exc:
            messages.error(request, str(exc))
            return self._back()
        if done:
            messages.success(request, f"Paused definition {name!r}: no attempt of it starts.")
        else:
            messages.warning(request, f"Definition {name!r} is paused already: nothing changed.")
        return self._back()

    def resume(self, request: HttpRequest) -> HttpResponse:
        name = self._permitted_name(request)
        form = ResumeForm(request.POST)
        reason = form.cleaned_data["reason"] if form.is_valid() else ""
        try:
            done = definition_pauses.resume_definition(
                name, reason=reason, actor=request.user.get_username()
            )
        except WorkerflowError as exc:
            messages.error(request, str(exc))
            return self._back()
        if done:
            messages.success(request, f"Resumed definition {name!r}: its due instances go on.")
        else:
            messages.warning(request, f"Definition {name!r} is not paused: nothing changed.")
        return self._back()

    def _permitted_name(self, request: HttpRequest) -> str:
        if not request.user.has_perm(PERMISSION):
            raise PermissionDenied
        return str(request.POST.get("definition", ""))

    def _back(self) -> HttpResponse:
        return HttpResponseRedirect(
            reverse(f"admin:{URL_NAME}", current_app=self.model_admin.admin_site.name)
        )


@admin.register(DefinitionPauseRecord)
class DefinitionPauseRecordAdmin(RecordAdminBase):
    """Every pause and resume of a definition, newest first: read-only, never deleted here."""

    list_display = ["at", "definition_name", "action", "actor", "reason"]
    list_filter = ["action", "definition_name"]
    search_fields = ["definition_name", "actor", "reason"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
