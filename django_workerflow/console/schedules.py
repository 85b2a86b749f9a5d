"""The console's schedules: the WorkflowSchedule admin (disable, enable, run now) and the
instance change list's filter by schedule.

Rows are read-only here: the code declares schedules, and every change goes through
:mod:`django_workerflow.runtime.flow.schedules`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, tzinfo
from typing import TYPE_CHECKING, Any, TypeAlias
from urllib.parse import urlencode
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.contrib import admin, messages
from django.contrib.admin import ModelAdmin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from django_workerflow.console.time_words import format_when, relative_time
from django_workerflow.exceptions import WorkerflowError
from django_workerflow.models import WorkflowInstance, WorkflowSchedule
from django_workerflow.runtime.flow import schedules
from django_workerflow.values.clock import now as clock_now

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
    "next_run",
    "last_run",
    "recent_runs",
)
# The list shows fewer (it fits 1,366 px with the sidebar open); the change page shows all.
LIST_COLUMNS = ("name", "cron_in_zone", "enabled", "in_code", "next_run", "recent_runs")
# Instances listed per schedule on its row (one query per schedule on the page).
RECENT_RUNS = 5


def instances_of(name: str) -> QuerySet[WorkflowInstance]:
    """The instances a schedule started: its occurrences and its manual runs."""
    return WorkflowInstance.objects.filter(definition_name=name, key__startswith=f"{name}@")


def schedule_zone(zone_name: str) -> tzinfo:
    try:
        return ZoneInfo(zone_name)
    except (ZoneInfoNotFoundError, ValueError):
        return UTC


def in_both_zones(when: datetime | None, zone_name: str) -> str:
    """A schedule's time in its own zone, then in UTC, then how far:
    "Dec 02 03:00:00 CET", "Dec 02 02:00:00 UTC", "(in 5 h 46 min)", one a line."""
    if when is None:
        return "-"
    now = clock_now()
    zone = schedule_zone(zone_name)
    lines = [format_when(when, now, relative=False, tz=zone)]
    if when.astimezone(zone).utcoffset() != timedelta(0):
        lines.append(format_when(when, now, relative=False, tz=UTC))
    lines.append(f"({relative_time(when, now)})")
    return format_html_join(mark_safe("<br>"), "{}", ((line,) for line in lines))


@admin.register(WorkflowSchedule)
class WorkflowScheduleAdmin(ScheduleAdminBase):
    list_display = LIST_COLUMNS
    list_filter = ["enabled", "in_code", "catch_up"]
    search_fields = ["name"]
    fields = readonly_fields = COLUMNS
    actions = [disable_selected, enable_selected, run_now_selected]
    change_list_template = "workerflow/admin/schedule_change_list.html"
    change_form_template = "workerflow/admin/schedule_change_form.html"

    @admin.display(description="cron", ordering="cron")
    def cron_in_zone(self, schedule: WorkflowSchedule) -> str:
        catch_up = "catches up" if schedule.catch_up else ""
        return format_html(
            "<code>{}</code><br>{}<br>{}", schedule.cron, schedule.timezone, catch_up
        )

    @admin.display(description="next run", ordering="next_run_at")
    def next_run(self, schedule: WorkflowSchedule) -> str:
        return in_both_zones(schedule.next_run_at, schedule.timezone)

    @admin.display(description="last run", ordering="last_run_at")
    def last_run(self, schedule: WorkflowSchedule) -> str:
        return in_both_zones(schedule.last_run_at, schedule.timezone)

    @admin.display(description="recent instances")
    def recent_runs(self, schedule: WorkflowSchedule) -> str:
        """The newest instances the schedule started, with their status, and a link to all."""
        recent = list(
            instances_of(schedule.name)
            .only("id", "key", "status", "created_at")
            .order_by("-created_at", "-id")[:RECENT_RUNS]
        )
        if not recent:
            return format_html('<span class="wf-empty">{}</span>', "none yet")
        zone = schedule_zone(schedule.timezone)
        now = clock_now()
        change = f"{self.admin_site.name}:workerflow_workflowinstance_change"
        items = format_html_join(
            "",
            '<li><span class="wf-badge wf-status-{}">{}</span> <a href="{}" title="{}">{}</a></li>',
            (
                (
                    run.status,
                    run.get_status_display(),
                    reverse(change, args=[run.pk]),
                    run.key,
                    # One unit: it wraps below the badge rather than inside itself.
                    format_when(run.created_at, now, relative=False, tz=zone).replace(
                        " ", "\u00a0"
                    ),
                )
                for run in recent
            ),
        )

        everything = reverse(f"{self.admin_site.name}:workerflow_workflowinstance_changelist")
        query = urlencode({"schedule": schedule.name})
        return format_html(
            '<ul class="wf-recent-runs">{}</ul><a href="{}?{}">All its instances</a>',
            items,
            everything,
            query,
        )

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        # Django titles a list "Select ... to change" when the user may change rows; here
        # the change permission only enables the actions, and every row is read-only.
        title = "Select workflow schedule to view"
        return super().changelist_view(request, {"title": title, **(extra_context or {})})

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
