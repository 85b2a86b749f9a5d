"""The columns of the instance list.

Each reads the instance row; "waiting on" also reads the steps that need attention, which
:class:`InstanceChangeList` prefetches for the displayed page in one query.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.db.models import Prefetch
from django.http import HttpRequest
from django.utils.functional import lazy
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from django_workerflow.console import describe, estimated_count, time_words
from django_workerflow.console.progress import progress_bar
from django_workerflow.definition import sensitive
from django_workerflow.models import WorkflowInstance
from django_workerflow.values.clock import now as clock_now


def _forks_prefetch() -> Prefetch[str, Any, str]:
    """Each instance's forks (``fork_list``), for the "waiting on" column's "forked to"."""
    forks = WorkflowInstance.objects.only("id", "key", "forked_from_id").order_by(
        "created_at", "id"
    )
    return Prefetch("forks", queryset=forks, to_attr="fork_list")


def _with_zone(label: str) -> Any:
    """A column header that names the zone its times are in: "created (UTC)"."""
    return lazy(lambda: f"{label} ({time_words.zone_name()})", str)()


def _breakable_key(key: str) -> str:
    """The key, allowed to wrap after its separators ("name@2026-12-01T02:00:00+00:00",
    "order-7/ship-1") rather than in the middle of a word."""
    parts = re.split(r"(?<=[@/~])", key)
    return format_html_join(mark_safe("<wbr>"), "{}", ((part,) for part in parts))


class InstanceChangeList(ChangeList):
    """Prefetch, for the displayed page only, what the "waiting on" column needs."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        self.result_list = self.result_list.prefetch_related(
            *describe.attention_prefetches(), _forks_prefetch()
        )
        # The masker of each row's sensitive values, for the errors "waiting on" quotes.
        maskers = sensitive.maskers_for(self.result_list, reveal=sensitive.may_reveal(request.user))
        for instance in self.result_list:
            # Read by the "waiting on" column; the model has no such field.
            instance.sensitive_masker = maskers.get(instance.pk, sensitive.REVEALED)
        # The template hides the date drill-down over a large list (estimated_count.py).
        self.large_list = self.result_count >= estimated_count.LARGE_LIST


#: The progress text the list shows under a status (the whole text on hover).
PROGRESS_TEXT_LIMIT = 60


class InstanceColumns:
    """The display methods the instance admin names in ``list_display``."""

    @admin.display(description="key", ordering="key")
    def key_column(self, instance: WorkflowInstance) -> str:
        return _breakable_key(instance.key)

    @admin.display(description="definition", ordering="definition_name")
    def definition(self, instance: WorkflowInstance) -> str:
        """The name, and its version whole on the line below."""
        return format_html(
            '{}<br><span class="wf-version">v{}</span>',
            instance.definition_name,
            instance.definition_version,
        )

    @admin.display(description="status", ordering="status")
    def status_badge(self, instance: WorkflowInstance) -> str:
        """The status, and the progress bar below it (no column of its own: the list fits
        1,366 px)."""
        badge = format_html(
            '<span class="wf-badge wf-status-{}">{}</span>',
            instance.status,
            instance.get_status_display(),
        )
        bar = progress_bar(instance.progress, limit=PROGRESS_TEXT_LIMIT)
        if not bar:
            return badge
        return format_html('{}<span class="wf-progress-line">{}</span>', badge, bar)

    @admin.display(description="waiting on")
    def waiting_on(self, instance: WorkflowInstance) -> str:
        missing = describe.missing_definition(instance)
        if missing:
            return format_html('<span class="wf-warning-text">{}</span>', missing)
        steps = getattr(instance, "attention_steps", None)
        if steps is None:  # the change page: read them for this one instance
            steps = instance.steps.filter(state__in=describe.ATTENTION_STATES)
        masker = getattr(instance, "sensitive_masker", None)
        if masker is None:  # the change page: this one instance, masked for everyone
            masker = sensitive.masker_for(instance)
        text = masker.text(
            describe.waiting_on(
                instance, steps, clock_now(), cancel_reason=describe.cancel_reason_of(instance)
            )
        )
        forks = getattr(instance, "fork_list", None)
        if forks is None:  # the change page: read them for this one instance
            forks = list(instance.forks.only("id", "key").order_by("created_at", "id"))
        if forks:
            names = ", ".join(f"'{fork.key}'" for fork in forks[:3])
            more = f" and {len(forks) - 3} more" if len(forks) > 3 else ""
            text = f"{text}; forked to {names}{more}" if text else f"forked to {names}{more}"
        return text or "-"

    @admin.display(description=_with_zone("created / updated"), ordering="created_at")
    def created_updated(self, instance: WorkflowInstance) -> str:
        """Both times in one column, so that the list fits a 1,366 px screen."""
        return format_html(
            "{}<br>{}", _short_time(instance.created_at), _short_time(instance.updated_at)
        )

    @admin.display(description=_with_zone("next alarm"), ordering="alarm_at")
    def next_alarm(self, instance: WorkflowInstance) -> str:
        if instance.alarm_at is None:
            return "-"
        now = clock_now()
        return format_html(
            '<span title="{}">{}</span> <span class="wf-note">{}</span>',
            time_words.clock_text(instance.alarm_at),
            _date_then_time(
                time_words.format_when(instance.alarm_at, now, relative=False, zone=False)
            ),
            time_words.relative_time(instance.alarm_at, now),
        )


def _short_time(when: datetime) -> str:
    """A short time in the list (its header says the zone); the full one on hover."""
    full = time_words.clock_text(when)
    short = _date_then_time(time_words.short_time(when, zone=False))
    return format_html('<span title="{}">{}</span>', full, short)


def _date_then_time(text: str) -> str:
    """ "Dec 03 20:04:17" may wrap between the date and the time, nowhere else."""
    if text[:1].isalpha():
        return text.replace(" ", "\u00a0", 1)
    return text
