"""The operations console in the Django admin: instances, their history, and safe controls.

Engine rows are read-only here: every change goes through :mod:`django_workerflow.runtime`
(via :mod:`django_workerflow.console.operations`), is allowed by its own permission, and is
recorded in the admin history with its reason. This module registers the model admin; the
console's columns, buttons, views and actions live in :mod:`django_workerflow.console`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern

from django_workerflow.console import (
    attributes,
    controls,
    list_actions,
    replay_verdicts,
    rerun_actions,
)
from django_workerflow.console.columns import InstanceChangeList, InstanceColumns
from django_workerflow.console.composition import DeliveryViews, TopLevelFilter, load_composition
from django_workerflow.console.definitions import DefinitionViews
from django_workerflow.console.estimated_count import EstimatedCountPaginator
from django_workerflow.console.history import load_history
from django_workerflow.console.instance_views import ControlViews
from django_workerflow.console.list_filters import IndexedValuesFilter, PendingDeliveryFilter
from django_workerflow.console.overview import OverviewView
from django_workerflow.console.rerun_views import RerunViews
from django_workerflow.console.schedules import ScheduleFilter, WorkflowScheduleAdmin  # noqa: F401 - registers
from django_workerflow.console.summary import MISSING_DEFINITION_HINT, build_summary
from django_workerflow.definition import sensitive
from django_workerflow.models import WorkflowInstance
from django_workerflow.values.clock import now as clock_now

if TYPE_CHECKING:  # ModelAdmin is generic for type checkers only
    InstanceAdminBase: TypeAlias = admin.ModelAdmin[WorkflowInstance]
else:
    InstanceAdminBase = admin.ModelAdmin


@admin.register(WorkflowInstance)
class WorkflowInstanceAdmin(InstanceColumns, InstanceAdminBase):
    list_display = [
        "key_column",
        "definition",
        "status_badge",
        "waiting_on",
        "created_updated",
        "next_alarm",
    ]
    list_filter = [
        "status",
        ("definition_name", IndexedValuesFilter),
        ("definition_version", IndexedValuesFilter),
        TopLevelFilter,
        ScheduleFilter,
        PendingDeliveryFilter,
        replay_verdicts.ReplayVerdictFilter,
    ]
    list_display_links = ["key_column"]
    search_fields = ["key", "definition_name"]
    search_help_text = (
        'Keys and definition names; name=value for an attribute (customer=c-42, order="42").'
    )
    date_hierarchy = "created_at"
    ordering = ["-created_at", "-id"]
    list_per_page = 50
    # No COUNT(*) over a large table: PostgreSQL's estimate (console/estimated_count.py).
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    actions = [
        list_actions.pause_selected,
        list_actions.resume_selected,
        list_actions.cancel_selected,
        list_actions.send_event,
        list_actions.wake_now,
        rerun_actions.retry_selected,
        rerun_actions.fork_selected,
        replay_verdicts.fork_onto_current,
        list_actions.delete_selected,
    ]
    # The page draws its own summary (console/summary.py) instead of a form of read-only rows.
    fields = readonly_fields = ("key",)
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

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return self._has_perm(request, "retry")

    def has_fork_permission(self, request: HttpRequest) -> bool:
        return self._has_perm(request, "fork")

    def _has_perm(self, request: HttpRequest, action: str) -> bool:
        opts = self.opts
        return request.user.has_perm(f"{opts.app_label}.{action}_{opts.model_name}")

    # Pages -------------------------------------------------------------------------------

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return InstanceChangeList

    def get_list_filter(self, request: HttpRequest) -> Any:
        # The attributes definitions name in attribute_filters (console/attributes.py).
        return [*self.list_filter, *attributes.list_filters()]

    def get_search_results(
        self, request: HttpRequest, queryset: Any, search_term: str
    ) -> tuple[Any, bool]:
        # "customer=c-42" terms filter by attribute; the rest searches keys and names.
        wanted, rest = attributes.split_search(search_term)
        return super().get_search_results(request, attributes.search(queryset, wanted), rest)

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        if request.method == "POST":
            list_actions.refuse_unpermitted(self, request)
        return super().changelist_view(request, extra_context)

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
            now = clock_now()
            reveal = sensitive.may_reveal(request.user)
            context["history"] = history = load_history(obj, now, reveal=reveal)
            context["summary"] = build_summary(history, now)
            context["missing_definition_hint"] = MISSING_DEFINITION_HINT
            context["controls"] = controls.buttons(self, request, obj)
            context["composition"] = load_composition(obj, history.masker)
            context["attribute_links"] = attributes.links(obj)
            context["may_deliver_now"] = self.has_resume_permission(request)
            context["replay_verdict"] = replay_verdicts.page_verdict(obj)
        return super().render_change_form(request, context, add, change, form_url, obj)

    def get_urls(self) -> list[URLPattern]:
        return [
            *OverviewView(self).urls(),
            *DefinitionViews(self).urls(),
            *ControlViews(self).urls(),
            *RerunViews(self).urls(),
            *DeliveryViews(self).urls(),
            *super().get_urls(),
        ]

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> tuple[Any, ...]:
        return list_actions.deletion_summary(self, objs, request)
