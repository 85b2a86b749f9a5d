"""The operations console in the Django admin: instances, their history, and safe controls.

Engine rows are read-only here: every change goes through :mod:`django_workerflow.runtime`
(via :mod:`django_workerflow.console.operations`), is allowed by its own permission, and is
recorded in the admin history with its reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.actions import delete_selected as django_delete_selected
from django.contrib.admin.utils import unquote
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.views.decorators.http import require_POST

from .clock import now as clock_now
from .console import describe, operations, timeline
from .console.forms import CancelForm, SendEventForm
from .console.history import load_history
from .models import (
    ACTIVE_STATUSES,
    TERMINAL_STATUSES,
    InboundEvent,
    Step,
    StepEvent,
    WorkflowEvent,
    WorkflowInstance,
    WorkflowStatus,
)

UNFINISHED = frozenset(ACTIVE_STATUSES | {WorkflowStatus.PAUSED})


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
    "pause": Control("Pause", "pause", frozenset({WorkflowStatus.RUNNING})),
    "resume": Control("Resume", "resume", frozenset({WorkflowStatus.PAUSED})),
    # Waking re-drives an instance: the same power as resuming one.
    "wake": Control("Wake now", "resume", frozenset(ACTIVE_STATUSES)),
    "send_event": Control("Send event…", "send_event", UNFINISHED, form=True),
    "cancel": Control("Cancel…", "cancel", UNFINISHED, form=True),
}


class InstanceChangeList(ChangeList):
    """Prefetch, for the displayed page only, what the "waiting on" column needs."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        self.result_list = self.result_list.prefetch_related(*describe.attention_prefetches())


@admin.register(WorkflowInstance)
class WorkflowInstanceAdmin(admin.ModelAdmin):
    list_display = [
        "key",
        "definition",
        "status_badge",
        "waiting_on",
        "created",
        "updated",
        "next_alarm",
    ]
    list_filter = ["status", "definition_name", "definition_version"]
    search_fields = ["key", "definition_name"]
    date_hierarchy = "created_at"
    ordering = ["-created_at", "-id"]
    list_per_page = 50
    actions = [
        "pause_selected",
        "resume_selected",
        "cancel_selected",
        "send_event",
        "wake_now",
        "delete_selected",
    ]
    fields = readonly_fields = (
        "key",
        "definition",
        "status_badge",
        "waiting_on",
        "created_at_full",
        "updated_at_full",
        "finished_at_full",
        "next_alarm",
        "lease",
    )
    change_list_template = "workerflow/admin/instance_change_list.html"
    change_form_template = "workerflow/admin/instance_change_form.html"

    # Permissions -------------------------------------------------------------------------

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Only a finished instance may be deleted; a live one is cancelled first."""
        allowed = super().has_delete_permission(request, obj)
        return allowed and (obj is None or obj.is_terminal)

    def has_pause_permission(self, request: HttpRequest) -> bool:
        return self._has_perm(request, "pause")

    def has_resume_permission(self, request: HttpRequest) -> bool:
        return self._has_perm(request, "resume")

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return self._has_perm(request, "cancel")

    def has_send_event_permission(self, request: HttpRequest) -> bool:
        return self._has_perm(request, "send_event")

    def _has_perm(self, request: HttpRequest, action: str) -> bool:
        opts = self.opts
        return request.user.has_perm(f"{opts.app_label}.{action}_{opts.model_name}")

    # Change list -------------------------------------------------------------------------

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return InstanceChangeList

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        if request.method == "POST":
            self._refuse_unpermitted_action(request)
        return super().changelist_view(request, extra_context)

    def _refuse_unpermitted_action(self, request: HttpRequest) -> None:
        """A posted action the user may not run is refused outright (403), not reported
        as "no action selected" like an empty choice."""
        names = request.POST.getlist("action")
        try:
            name = names[int(request.POST.get("index", 0))]
        except (IndexError, ValueError):
            name = names[0] if names else ""
        if name and name not in self.get_actions(request):
            raise PermissionDenied

    @admin.display(description="definition", ordering="definition_name")
    def definition(self, instance: WorkflowInstance) -> str:
        return f"{instance.definition_name} v{instance.definition_version}"

    @admin.display(description="status", ordering="status")
    def status_badge(self, instance: WorkflowInstance) -> str:
        return format_html(
            '<span class="wf-badge wf-status-{}">{}</span>',
            instance.status,
            instance.get_status_display(),
        )

    @admin.display(description="waiting on")
    def waiting_on(self, instance: WorkflowInstance) -> str:
        steps = getattr(instance, "attention_steps", None)
        if steps is None:  # the change page: read them for this one instance
            steps = instance.steps.filter(state__in=describe.ATTENTION_STATES)
        text = describe.waiting_on(
            instance, steps, clock_now(), cancel_reason=describe.cancel_reason_of(instance)
        )
        return text or "-"

    @admin.display(description="created", ordering="created_at")
    def created(self, instance: WorkflowInstance) -> str:
        return self._time(instance.created_at)

    @admin.display(description="updated", ordering="updated_at")
    def updated(self, instance: WorkflowInstance) -> str:
        return self._time(instance.updated_at)

    def _time(self, when: Any) -> str:
        """A short time in the list; the full one on hover."""
        full = timeline.clock_text(when)
        return format_html('<span title="{}">{}</span>', full, timeline.short_time(when))

    @admin.display(description="created")
    def created_at_full(self, instance: WorkflowInstance) -> str:
        return self._full_time(instance.created_at)

    @admin.display(description="updated")
    def updated_at_full(self, instance: WorkflowInstance) -> str:
        return self._full_time(instance.updated_at)

    @admin.display(description="finished")
    def finished_at_full(self, instance: WorkflowInstance) -> str:
        return self._full_time(instance.finished_at)

    def _full_time(self, when: Any) -> str:
        if when is None:
            return "-"
        return f"{timeline.clock_text(when)} ({describe.relative_time(when, clock_now())})"

    @admin.display(description="next alarm", ordering="alarm_at")
    def next_alarm(self, instance: WorkflowInstance) -> str:
        return describe.format_when(instance.alarm_at, clock_now()) or "-"

    @admin.display(description="worker lease")
    def lease(self, instance: WorkflowInstance) -> str:
        if not instance.lease_token:
            return "-"
        until = describe.format_when(instance.lease_expires_at, clock_now())
        return f"held until {until} (token {instance.lease_token[:8]})"

    # Change page -------------------------------------------------------------------------

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: WorkflowInstance | None = None,
    ) -> HttpResponse:
        if obj is not None:
            context["history"] = load_history(obj, clock_now())
            context["controls"] = self._controls(request, obj)
        return super().render_change_form(request, context, add, change, form_url, obj)

    def _controls(self, request: HttpRequest, instance: WorkflowInstance) -> list[dict[str, Any]]:
        """The buttons the user may press on this instance now."""
        return [
            {
                "name": name,
                "label": control.label,
                "url": self._url(name, instance.pk),
                "post": not control.form,
            }
            for name, control in CONTROLS.items()
            if instance.status in control.statuses and self._has_perm(request, control.permission)
        ]

    def get_urls(self) -> list[Any]:
        views = {
            "pause": require_POST(self.pause_view),
            "resume": require_POST(self.resume_view),
            "wake": require_POST(self.wake_view),
            "cancel": self.cancel_view,
            "send_event": self.send_event_view,
        }
        wrap = self.admin_site.admin_view
        urls = [
            path(f"<path:object_id>/{name}/", wrap(view), name=self._url_name(name))
            for name, view in views.items()
        ]
        return urls + super().get_urls()

    def pause_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        instance = self._instance_for(request, object_id, "pause")
        return self._done(request, operations.pause([instance]), instance)

    def resume_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        instance = self._instance_for(request, object_id, "resume")
        return self._done(request, operations.resume([instance]), instance)

    def wake_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        instance = self._instance_for(request, object_id, "wake")
        return self._done(request, operations.wake([instance]), instance)

    def cancel_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        instance = self._instance_for(request, object_id, "cancel")
        form = CancelForm(request.POST if request.method == "POST" else None)
        if form.is_valid():
            report = operations.cancel([instance], form.cleaned_data["reason"])
            return self._done(request, report, instance)
        return self._form_page(request, "cancel", form, [instance])

    def send_event_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        instance = self._instance_for(request, object_id, "send_event")
        form = SendEventForm(request.POST if request.method == "POST" else None)
        if form.is_valid():
            data = form.cleaned_data
            report = operations.send_event([instance], data["event_name"], data["payload"])
            return self._done(request, report, instance)
        return self._form_page(request, "send_event", form, [instance])

    def _instance_for(self, request: HttpRequest, object_id: str, control: str) -> WorkflowInstance:
        if not self._has_perm(request, CONTROLS[control].permission):
            raise PermissionDenied
        instance = self.get_object(request, unquote(object_id))
        if instance is None:
            raise Http404(f"No workflow instance with id {object_id!r}.")
        return instance

    def _done(
        self, request: HttpRequest, report: operations.Report, instance: WorkflowInstance
    ) -> HttpResponse:
        self._record(request, report)
        return HttpResponseRedirect(self._url("change", instance.pk))

    # List actions ------------------------------------------------------------------------

    @admin.action(permissions=["pause"], description="Pause selected workflows")
    def pause_selected(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._record(request, operations.pause(queryset.order_by("pk")))

    @admin.action(permissions=["resume"], description="Resume selected workflows")
    def resume_selected(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._record(request, operations.resume(queryset.order_by("pk")))

    @admin.action(permissions=["resume"], description="Wake selected workflows now")
    def wake_now(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._record(request, operations.wake(queryset.order_by("pk")))

    @admin.action(permissions=["cancel"], description="Cancel selected workflows…")
    def cancel_selected(self, request: HttpRequest, queryset: QuerySet) -> HttpResponse | None:
        form = CancelForm(request.POST if "apply" in request.POST else None)
        if form.is_valid():
            report = operations.cancel(queryset.order_by("pk"), form.cleaned_data["reason"])
            self._record(request, report)
            return None
        return self._form_page(request, "cancel", form, list(queryset), action="cancel_selected")

    @admin.action(permissions=["send_event"], description="Send an event to selected workflows…")
    def send_event(self, request: HttpRequest, queryset: QuerySet) -> HttpResponse | None:
        form = SendEventForm(request.POST if "apply" in request.POST else None)
        if form.is_valid():
            data = form.cleaned_data
            report = operations.send_event(
                queryset.order_by("pk"), data["event_name"], data["payload"]
            )
            self._record(request, report)
            return None
        return self._form_page(request, "send_event", form, list(queryset), action="send_event")

    @admin.action(permissions=["delete"], description="Delete selected finished workflows")
    def delete_selected(self, request: HttpRequest, queryset: QuerySet) -> HttpResponse | None:
        """Django's delete action, limited to finished instances."""
        unfinished = queryset.exclude(status__in=TERMINAL_STATUSES).count()
        if unfinished and "post" not in request.POST:
            self.message_user(
                request,
                f"{unfinished} skipped: not finished (only completed, failed or cancelled "
                "workflows can be deleted; cancel them first).",
                messages.WARNING,
            )
        finished = queryset.filter(status__in=TERMINAL_STATUSES)
        if not finished.exists():
            return None
        return django_delete_selected(self, request, finished)

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> tuple[Any, ...]:
        """Summarise the rows a deletion removes instead of listing every step event."""
        instances = list(objs)
        pks = [instance.pk for instance in instances]
        counts = {self.opts.verbose_name_plural: len(instances)}
        for model in (Step, StepEvent, WorkflowEvent, InboundEvent):
            count = model.objects.filter(instance_id__in=pks).count()
            if count:
                counts[model._meta.verbose_name_plural] = count
        refused = [i for i in instances if not self.has_delete_permission(request, i)]
        perms_needed = {self.opts.verbose_name} if refused else set()
        return [str(instance) for instance in instances], counts, perms_needed, []

    # Shared ------------------------------------------------------------------------------

    def _record(self, request: HttpRequest, report: operations.Report) -> None:
        """Log each change in the admin history and tell the user what happened."""
        for outcome in report.done:
            self.log_change(request, outcome.instance, outcome.detail)
        level = messages.SUCCESS if report.done and not report.skipped else messages.WARNING
        self.message_user(request, report.summary(), level)

    def _form_page(
        self,
        request: HttpRequest,
        control: str,
        form: Any,
        instances: list[WorkflowInstance],
        *,
        action: str = "",
    ) -> HttpResponse:
        """The confirmation page of cancel and send event, for a selection or one instance."""
        titles = {"cancel": "Cancel workflows", "send_event": "Send an event"}
        buttons = {"cancel": "Yes, cancel", "send_event": "Send event"}
        statuses = CONTROLS[control].statuses
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": titles[control],
            "control": control,
            "form": form,
            "instances": instances,
            "skipped": [i for i in instances if i.status not in statuses],
            "action": action,
            "submit_label": buttons[control],
            "back_url": self._url("change", instances[0].pk)
            if not action
            else self._url("changelist"),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "workerflow/admin/action_form.html", context)

    def _url_name(self, name: str) -> str:
        return f"{self.opts.app_label}_{self.opts.model_name}_{name}"

    def _url(self, name: str, *args: Any) -> str:
        return reverse(f"{self.admin_site.name}:{self._url_name(name)}", args=args)
