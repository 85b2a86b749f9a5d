"""The columns of the instance list.

Each reads the instance row; "waiting on" also reads the steps that need attention, which
:class:`InstanceChangeList` prefetches for the displayed page in one query.
"""

from __future__ import annotations

from datetime import datetime

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.http import HttpRequest
from django.utils.html import format_html

from django_workerflow.console import describe, estimated_count
from django_workerflow.models import WorkflowInstance
from django_workerflow.values.clock import now as clock_now


class InstanceChangeList(ChangeList):
    """Prefetch, for the displayed page only, what the "waiting on" column needs."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        self.result_list = self.result_list.prefetch_related(*describe.attention_prefetches())
        # The template hides the date drill-down over a large list (estimated_count.py).
        self.large_list = self.result_count >= estimated_count.LARGE_LIST


class InstanceColumns:
    """The display methods the instance admin names in ``list_display``."""

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
        missing = describe.missing_definition(instance)
        if missing:
            return format_html('<span class="wf-warning-text">{}</span>', missing)
        steps = getattr(instance, "attention_steps", None)
        if steps is None:  # the change page: read them for this one instance
            steps = instance.steps.filter(state__in=describe.ATTENTION_STATES)
        text = describe.waiting_on(
            instance, steps, clock_now(), cancel_reason=describe.cancel_reason_of(instance)
        )
        return text or "-"

    @admin.display(description="created", ordering="created_at")
    def created(self, instance: WorkflowInstance) -> str:
        return _short_time(instance.created_at)

    @admin.display(description="updated", ordering="updated_at")
    def updated(self, instance: WorkflowInstance) -> str:
        return _short_time(instance.updated_at)

    @admin.display(description="next alarm", ordering="alarm_at")
    def next_alarm(self, instance: WorkflowInstance) -> str:
        return describe.format_when(instance.alarm_at, clock_now()) or "-"


def _short_time(when: datetime) -> str:
    """A short time in the list; the full one on hover."""
    full = describe.clock_text(when)
    return format_html('<span title="{}">{}</span>', full, describe.short_time(when))
