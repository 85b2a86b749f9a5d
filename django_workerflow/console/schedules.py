"""The console's schedules: the WorkflowSchedule admin (disable, enable, run now) and the
instance change list's filter by schedule.

Rows are read-only here: the code declares schedules, and every change goes through
:mod:`django_workerflow.cron_schedules`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

from django.contrib import admin, messages
from django.contrib.admin import ModelAdmin
from django.db.models import QuerySet
from django.http import HttpRequest

from django_workerflow.exceptions import WorkerflowError
from django_workerflow.models import WorkflowInstance, WorkflowSchedule
from django_workerflow.runtime.flow import schedules

if TYPE_CHECKING:  # ModelAdmin is generic for type checkers only
    ScheduleAdminBase: TypeAlias = ModelAdmin[WorkflowSchedule]
else:
    ScheduleAdminBase = ModelAdmin
Schedules: TypeAlias = QuerySet[WorkflowSchedule]


class ScheduleFilter(admin.SimpleListFilter):
    """Instances started by one schedule (its occurrences and its manual runs)."""

    title = "schedule"
    parameter_name = "schedule"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        names = WorkflowSchedule.objects.values_list("name", flat=True)
        return [(name, name) for name in names]

    def queryset(
        self, request: HttpRequest, queryset: QuerySet[WorkflowInstance]
    ) -> QuerySet[WorkflowInstance]:
        name = self.value()
        if not name:
            return queryset
        return queryset.filter(definition_name=name, key__startswith=f"{name}@")


def _set_enabled(request: HttpRequest, queryset: Schedules, enabled: bool) -> tuple[int, list[str]]:
    changed, refused = 0, []
    for name in queryset.order_by("name").values_list("name", flat=True):
        try:
            changed += schedules.set_enabled(name, enabled)
        except WorkerflowError as error:
            refused.append(str(error))
    return changed, refused


@admin.action(permissions=["change"], description="Disable selected schedules")
def disable_selected(model_admin: Any, request: HttpRequest, queryset: Schedules) -> None:
    changed, _ = _set_enabled(request, queryset, False)
    model_admin.message_user(request, f"{changed} schedule(s) disabled.", messages.SUCCESS)


@admin.action(permissions=["change"], description="Enable selected schedules")
def enable_selected(model_admin: Any, request: HttpRequest, queryset: Schedules) -> None:
    changed, refused = _set_enabled(request, queryset, True)
    model_admin.message_user(request, f"{changed} schedule(s) enabled.", messages.SUCCESS)
    for reason in refused:
        model_admin.message_user(request, reason, messages.ERROR)


@admin.action(permissions=["run"], description="Run selected scheduled workflows now")
def run_now_selected(model_admin: Any, request: HttpRequest, queryset: Schedules) -> None:
    started = [
        schedules.run_now(name).key
        for name in queryset.filter(in_code=True).order_by("name").values_list("name", flat=True)
    ]
    model_admin.message_user(
        request, f"Started {len(started)}: {', '.join(started)}.", messages.SUCCESS
    )


COLUMNS = (
    "name",
    "cron",
    "timezone",
    "catch_up",
    "enabled",
    "in_code",
    "next_run_at",
    "last_run_at",
)


@admin.register(WorkflowSchedule)
class WorkflowScheduleAdmin(ScheduleAdminBase):
    list_display = COLUMNS
    list_filter = ["enabled", "in_code"]
    search_fields = ["name"]
    fields = readonly_fields = COLUMNS
    actions = [disable_selected, enable_selected, run_now_selected]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # The change page only shows the row; the actions need the change permission.
        return obj is None and super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_run_permission(self, request: HttpRequest) -> bool:
        opts = self.opts
        return request.user.has_perm(f"{opts.app_label}.run_{opts.model_name}")
