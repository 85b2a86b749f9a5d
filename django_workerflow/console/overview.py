"""The overview page (Workflows, then Overview): every definition's state at a glance.

Each figure is one grouped query on an index, never a query per row: instances by status per
definition (``workerflow_name_status``), the last 24 hours per hour (``workerflow_created``
for starts, ``workerflow_status_finished`` for completions and failures), the oldest
instance of each kind (``workerflow_status_created``, ``workerflow_alarm_due``), the
admission queues (``workerflow_queue``), the wake lag of the last hour (the partial
``workerflow_event_woken``: the sleeps woken, by time), then the small tables (deliveries,
heartbeats, schedules). Every count links to the change list filtered to what it counts;
the chart is an inline SVG drawn here, each bar a link: no JavaScript, nothing fetched.

Wake lag is ``models.WAKE_LAG`` (the metrics' histogram reads the same): a sleep's due time
to the tick that recorded it elapsed, over the sleeps woken in the last hour. Its p50 and
p99 are PostgreSQL's ``percentile_cont`` in the database; on other databases they are the
same interpolation done here, over the newest :data:`LAG_SAMPLE` sleeps of the hour.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

import django
from django.contrib.admin import ModelAdmin
from django.core.exceptions import PermissionDenied
from django.db.models import (
    Count,
    Min,
)
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from django_workerflow.console.controls import admin_url
from django_workerflow.console.list_filters import DELIVERY_PARAMETER, PENDING
from django_workerflow.console.schedules import in_both_zones
from django_workerflow.console.time_words import format_duration, format_when
from django_workerflow.deploy import health
from django_workerflow.models import (
    WAKE_LAG,
    FinishDelivery,
    StepEvent,
    WorkerHeartbeat,
    WorkflowInstance,
    WorkflowSchedule,
    WorkflowStatus,
)
from django_workerflow.store import definition_pauses, instance_counts
from django_workerflow.store import wake_lags as wake_lag_reads
from django_workerflow.values.clock import now as clock_now

#: The name of the page's URL in the admin's namespace: ``admin:workerflow_overview``.
URL_NAME = "workerflow_overview"
HOURS = 24
#: How many pause and resume records of definitions the page shows.
PAUSE_RECORDS = 5
#: The chart's series: (name, label, colour), in the order the bars of an hour are drawn.
SERIES = (
    ("started", "started", "#0969da"),
    ("completed", "completed", "#1a7f37"),
    ("failed", "failed", "#cf222e"),
)
STATUSES = tuple(WorkflowStatus)
ACTIVE = (WorkflowStatus.PENDING, WorkflowStatus.RUNNING)
#: Where the database has no percentile function, the wake lag percentiles are computed
#: here over at most this many sleeps, the newest of the hour.
LAG_SAMPLE = 10_000
LAG_WINDOW = timedelta(hours=1)

Linker = Callable[..., str]


@dataclass(frozen=True, slots=True)
class Figure:
    """A number and the change list filtered to what it counts."""

    label: str
    count: int
    url: str
    #: Estimated from a sample of the table (a large count on PostgreSQL), not counted.
    estimated: bool = False


@dataclass(frozen=True, slots=True)
class WakeLag:
    """How late the sleeps woken in the last hour woke: their number and two percentiles
    (None without a sleep); ``sampled`` when computed over :data:`LAG_SAMPLE` of them."""

    sleeps: int
    p50: timedelta | None
    p99: timedelta | None
    sampled: bool = False

    @property
    def p50_text(self) -> str:
        return format_duration(self.p50) if self.p50 is not None else ""

    @property
    def p99_text(self) -> str:
        return format_duration(self.p99) if self.p99 is not None else ""


@dataclass(frozen=True, slots=True)
class DefinitionOverview:
    name: str
    total: Figure
    by_status: list[Figure]
    chart: SafeString
    hourly_totals: list[Figure]
    wake_lag: WakeLag


@dataclass(frozen=True, slots=True)
class Oldest:
    """The oldest instance of a kind, and since when it has been so."""

    label: str
    instance: WorkflowInstance | None
    since: str
    url: str


@dataclass(frozen=True, slots=True)
class Gate:
    definition_name: str
    concurrency_key: str
    queued: Figure
    oldest: str


@dataclass(frozen=True, slots=True)
class Cluster:
    queue: str
    last_reported: str


@dataclass(frozen=True, slots=True)
class ScheduleRow:
    name: str
    cron: str
    timezone: str
    enabled: bool
    next_run: str  # HTML from in_both_zones
    instances: str


def _linker(model_admin: ModelAdmin[WorkflowInstance]) -> Linker:
    base = admin_url(model_admin, "changelist")

    def link(**params: str) -> str:
        return f"{base}?{urlencode(params)}" if params else base

    return link


def hour_starts(now: datetime) -> list[datetime]:
    """The starts of the last 24 hours (UTC), oldest first, the current hour last."""
    this_hour = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    return [this_hour - timedelta(hours=HOURS - 1 - i) for i in range(HOURS)]


def hourly(now: datetime) -> dict[str, dict[str, dict[datetime, int]]]:
    """Per definition, per series, per hour (UTC): the number started, completed, failed.
    Two grouped queries, each a range on an index: on PostgreSQL grouped by the hour
    (``date_trunc``); elsewhere with one filtered count per hour, comparisons only, no date
    function evaluated per row (SQLite's is Python)."""
    hours = hour_starts(now)
    end = hours[-1] + timedelta(hours=1)
    counts: dict[str, dict[str, dict[datetime, int]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(int))
    )
    started = WorkflowInstance.objects.filter(created_at__gte=hours[0], created_at__lt=end)
    for name, _, hour, n in instance_counts.per_hour(started, "created_at", hours):
        counts[name]["started"][hour] += n
    finished = WorkflowInstance.objects.filter(
        status__in=[WorkflowStatus.COMPLETED, WorkflowStatus.FAILED],
        finished_at__gte=hours[0],
        finished_at__lt=end,
    )
    for name, status, hour, n in instance_counts.per_hour(finished, "finished_at", hours):
        counts[name][status][hour] += n
    return counts


def series_filter(name: str, key: str, start: datetime, end: datetime) -> dict[str, str]:
    """The change list's filter for the instances of ``name`` that the series ``key``
    counts from ``start`` to before ``end``: started by their creation, completed and
    failed by their finish (range lookups on local fields, which the admin accepts)."""
    if key == "started":
        return {
            "definition_name": name,
            "created_at__gte": start.isoformat(),
            "created_at__lt": end.isoformat(),
        }
    return {
        "definition_name": name,
        "status__exact": key,
        "finished_at__gte": start.isoformat(),
        "finished_at__lt": end.isoformat(),
    }


def bar_chart(
    name: str, series: dict[str, dict[datetime, int]], now: datetime, link: Linker
) -> SafeString:
    """An inline SVG of the last 24 hours: per hour, a bar for each of the series, with a
    ``<title>`` on each bar ("14:00 CET: 3 started") and hour labels in the current zone.
    Each bar links to the instances it counts."""
    hours = hour_starts(now)
    one = timedelta(hours=1)
    peak = max([1, *(n for per_hour in series.values() for n in per_hour.values())])
    width, height, top, bottom, left = 720, 140, 10, 20, 28
    slot = (width - left) / HOURS
    bar = (slot - 4) / len(SERIES)
    plot = height - top - bottom
    parts: list[str] = []
    for i, hour in enumerate(hours):
        label = format_when(hour, now, relative=False)
        for j, (key, word, colour) in enumerate(SERIES):
            n = series.get(key, {}).get(hour, 0)
            tall = plot * n / peak
            x = left + i * slot + 2 + j * bar
            parts.append(
                format_html(
                    '<a href="{}"><rect class="wf-bar wf-bar-{}" x="{}" y="{}" width="{}" '
                    'height="{}" fill="{}"><title>{}: {} {}</title></rect></a>',
                    link(**series_filter(name, key, hour, hour + one)),
                    key,
                    _px(x),
                    _px(top + plot - tall),
                    _px(bar),
                    _px(tall),
                    colour,
                    label,
                    n,
                    word,
                )
            )
        if i % 3 == 0:
            local = timezone.localtime(hour)
            parts.append(
                format_html(
                    '<text x="{}" y="{}" font-size="10" fill="currentColor">{}</text>',
                    _px(left + i * slot),
                    height - 6,
                    local.strftime("%H:%M"),
                )
            )
    axis = format_html(
        '<text x="0" y="{}" font-size="10" fill="currentColor">{}</text>'
        '<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="currentColor" stroke-opacity=".3"/>',
        top + 8,
        peak,
        left,
        top + plot,
        width,
        top + plot,
    )
    zone = timezone.localtime(now).tzname() or ""
    return format_html(
        '<svg class="wf-chart" role="img" viewBox="0 0 {} {}" width="{}" height="{}" '
        'xmlns="http://www.w3.org/2000/svg"><title>{}: started, completed and failed per '
        "hour over the last 24 hours (hours in {})</title>{}{}</svg>",
        width,
        height,
        width,
        height,
        name,
        zone,
        axis,
        mark_safe("".join(parts)),  # each part is built by format_html
    )


def _px(value: float) -> str:
    return f"{value:.1f}"


def counts_by_status() -> dict[str, dict[str, tuple[int, bool]]]:
    """Per definition and status, the number of instances and whether it is an estimate
    (:func:`~django_workerflow.store.instance_counts.counts_by_status`: any status may be)."""
    counts: dict[str, dict[str, tuple[int, bool]]] = defaultdict(dict)
    for (name, status), figure in instance_counts.counts_by_status().items():
        counts[name][status] = figure
    return counts


def _status_figure(
    link: Linker, name: str, status: WorkflowStatus, counts: dict[str, tuple[int, bool]]
) -> Figure:
    n, estimated = counts.get(status.value, (0, False))
    url = link(definition_name=name, status__exact=status.value)
    return Figure(status.label, n, url, estimated=estimated)


def by_definition(link: Linker, now: datetime) -> list[DefinitionOverview]:
    """Every definition with an instance, an event in the last 24 hours or a sleep woken in
    the last hour."""
    counts = counts_by_status()
    per_hour = hourly(now)
    lags = wake_lags(now)
    hours = hour_starts(now)
    window = (hours[0], hours[-1] + timedelta(hours=1))
    overviews = []
    for name in sorted(counts.keys() | per_hour.keys() | lags.keys()):
        statuses = counts.get(name, {})
        series = per_hour.get(name, {})
        overviews.append(
            DefinitionOverview(
                name=name,
                total=Figure(
                    "all",
                    sum(n for n, _ in statuses.values()),
                    link(definition_name=name),
                    estimated=any(estimated for _, estimated in statuses.values()),
                ),
                by_status=[_status_figure(link, name, status, statuses) for status in STATUSES],
                chart=bar_chart(name, series, now, link),
                hourly_totals=[
                    Figure(
                        word,
                        sum(series.get(key, {}).values()),
                        link(**series_filter(name, key, *window)),
                    )
                    for key, word, _ in SERIES
                ],
                wake_lag=lags.get(name, WakeLag(0, None, None)),
            )
        )
    return overviews


def percentile(ordered: list[timedelta], fraction: float) -> timedelta:
    """The ``fraction`` percentile of ``ordered`` (sorted, not empty), interpolated
    linearly between the two closest ranks as PostgreSQL's ``percentile_cont``."""
    position = fraction * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def wake_lags(now: datetime) -> dict[str, WakeLag]:
    """Per definition, the wake lag (``models.WAKE_LAG``) of the sleeps woken in the last
    hour: one grouped query with ``percentile_cont`` on PostgreSQL; elsewhere the newest
    :data:`LAG_SAMPLE` lags of the hour, read in one query and interpolated here."""
    grouped = wake_lag_reads.by_definition(now - LAG_WINDOW)
    if grouped is not None:
        return {name: WakeLag(n, p50, p99) for name, (n, p50, p99) in grouped.items()}
    events = StepEvent.objects.woken_sleeps().filter(recorded_at__gte=now - LAG_WINDOW)
    sample = (
        events.annotate(lag=WAKE_LAG)
        .order_by("-recorded_at", "-id")
        .values_list("instance__definition_name", "lag")[:LAG_SAMPLE]
    )
    per_definition: dict[str, list[timedelta]] = defaultdict(list)
    rows_read = 0
    for name, lag in sample:
        per_definition[name].append(lag)
        rows_read += 1
    sampled = rows_read == LAG_SAMPLE
    found = {}
    for name, lags in per_definition.items():
        lags.sort()
        found[name] = WakeLag(len(lags), percentile(lags, 0.5), percentile(lags, 0.99), sampled)
    return found


def oldest(link: Linker, now: datetime) -> list[Oldest]:
    """The oldest running and pending instances (by creation), and the instance that has
    waited longest for a worker (active, its alarm come: by its alarm)."""
    found = []
    for status in (WorkflowStatus.RUNNING, WorkflowStatus.PENDING):
        instance = (
            WorkflowInstance.objects.filter(status=status).order_by("created_at", "id").first()
        )
        since = format_when(instance.created_at, now) if instance else ""
        found.append(
            Oldest(f"oldest {status.label.lower()}", instance, since, link(status__exact=status))
        )
    # One status at a time: each is an ordered range of workerflow_alarm_due, where due()'s
    # two statuses at once sort every due row (160 ms at 1,000,000 instances, 250,000 due).
    # A paused definition's instances wait for an operator, not for a worker (unheld()).
    candidates = [
        WorkflowInstance.objects.filter(status=status, alarm_at__lte=now)
        .unheld()
        .order_by("alarm_at", "id")
        .first()
        for status in ACTIVE
    ]
    due = min(
        (c for c in candidates if c is not None),
        key=lambda c: (c.alarm_at, c.pk),
        default=None,
    )
    found.append(
        Oldest(
            "waiting longest for a worker",
            due,
            format_when(due.alarm_at, now) if due else "",
            link(),
        )
    )
    return found


def gates(link: Linker, now: datetime) -> list[Gate]:
    """Queued instances (pending, not admitted) per definition and concurrency key."""
    rows = (
        WorkflowInstance.objects.filter(status=WorkflowStatus.PENDING, admitted_at__isnull=True)
        .values("definition_name", "concurrency_key")
        .annotate(n=Count("id"), first=Min("created_at"))
        .order_by("definition_name", "concurrency_key")
    )
    return [
        Gate(
            row["definition_name"],
            row["concurrency_key"],
            Figure(
                "queued",
                row["n"],
                link(
                    definition_name=row["definition_name"],
                    concurrency_key=row["concurrency_key"],
                    status__exact=WorkflowStatus.PENDING.value,
                    admitted_at__isnull="True",
                ),
            ),
            format_when(row["first"], now),
        )
        for row in rows
    ]


@dataclass(frozen=True, slots=True)
class Deliveries:
    """The ``on_finish`` deliveries not yet acknowledged: their number, the instances they
    belong to (linked: an instance retried after a failure may have two), the oldest's time."""

    pending: int
    instances: Figure
    oldest: str


def deliveries(link: Linker, now: datetime) -> Deliveries:
    summary = FinishDelivery.objects.pending().aggregate(
        n=Count("id"), instances=Count("instance", distinct=True), first=Min("created_at")
    )
    return Deliveries(
        summary["n"],
        Figure("instances", summary["instances"], link(**{DELIVERY_PARAMETER: PENDING})),
        format_when(summary["first"], now),
    )


def clusters(now: datetime) -> list[Cluster]:
    return [
        Cluster(beat.queue, format_when(beat.beat_at, now))
        for beat in WorkerHeartbeat.objects.order_by("queue")
    ]


def schedule_rows(link: Linker) -> list[ScheduleRow]:
    return [
        ScheduleRow(
            row.name,
            row.cron,
            row.timezone,
            row.enabled,
            in_both_zones(row.next_run_at if row.enabled else None, row.timezone),
            link(schedule=row.name),
        )
        for row in WorkflowSchedule.objects.order_by("name")
    ]


def build(model_admin: ModelAdmin[WorkflowInstance], now: datetime) -> dict[str, Any]:
    """The page's figures, as template context."""
    link = _linker(model_admin)
    return {
        "definitions": by_definition(link, now),
        "oldest": oldest(link, now),
        "gates": gates(link, now),
        "deliveries": deliveries(link, now),
        "clusters": clusters(now),
        "stranded": health.stranded_queues(now),
        "paused": [
            (pause, format_when(pause.paused_at, now)) for pause in definition_pauses.all_paused()
        ],
        "pause_records": definition_pauses.recent_records(PAUSE_RECORDS),
        "schedules": schedule_rows(link),
        "series": SERIES,
        "generated": format_when(now, now, relative=False),
        "zone": timezone.localtime(now).tzname() or "",
        "changelist_url": link(),
    }


class OverviewView:
    """The overview page of one model admin, behind the admin's login and its view
    permission on instances."""

    def __init__(self, model_admin: ModelAdmin[WorkflowInstance]) -> None:
        self.model_admin = model_admin

    def urls(self) -> list[URLPattern]:
        wrap = self.model_admin.admin_site.admin_view
        return [path("overview/", wrap(self.view), name=URL_NAME)]

    def view(self, request: HttpRequest) -> HttpResponse:
        if not self.model_admin.has_view_permission(request):
            raise PermissionDenied
        context = {
            **self.model_admin.admin_site.each_context(request),
            "opts": self.model_admin.opts,
            "title": "Overview",
            "breadcrumbs_as_list": django.VERSION >= (6, 0),
            **build(self.model_admin, clock_now()),
        }
        request.current_app = self.model_admin.admin_site.name
        return TemplateResponse(request, "workerflow/admin/overview.html", context)
