"""Prometheus metrics of the whole fleet, read from the database when they are scraped.

Mount the view, ``path("workerflow/metrics", django_workerflow.metrics.view)``; ``manage.py
workerflow metrics`` prints the same text. It needs the optional extra
``django-workerflow[metrics]`` (``prometheus-client``); without it the view answers 501.

Every figure, counters included, is read from the database at scrape time, not kept in
process memory, so there is no ``prometheus-client`` multiprocess mode and no setting for
it: the database already holds every process's facts (instances, step events, deliveries,
the workers' heartbeats), so a scrape from the web process sees every cluster and worker
process, and ticks run in the scraping process itself (the test harness), with nothing to
configure. The counters are counts of step events: a purge deletes events, which lowers
them, and Prometheus reads a drop as a counter reset (``rate()`` and ``increase()`` stay
right).

Labels are bounded: definition names, statuses, step types, outcomes and task queues; never
an instance key, a step id or a concurrency key.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from django.db.models import (
    Count,
    DurationField,
    ExpressionWrapper,
    F,
    FilteredRelation,
    Min,
    Q,
    QuerySet,
    Sum,
)
from django.http import HttpRequest, HttpResponse
from django.utils.module_loading import import_string

from django_workerflow import registry
from django_workerflow.conf import settings
from django_workerflow.engine.failures import INTERRUPTED_ERROR_NAME
from django_workerflow.models import (
    ACTIVE_STATUSES,
    WAKE_LAG_SINCE,
    FinishDelivery,
    StepEvent,
    WorkerHeartbeat,
    WorkflowInstance,
    WorkflowStatus,
)
from django_workerflow.values.clock import now as clock_now
from django_workerflow.values.states import StepEventType

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

__all__ = ["Family", "families", "text", "view"]

MISSING_EXTRA = (
    "The metrics need prometheus-client: install django-workerflow[metrics] "
    "(pip install 'django-workerflow[metrics]').\n"
)


@dataclass(frozen=True)
class Family:
    """One metric: its name (a counter's without ``_total``), kind, help and samples."""

    name: str
    kind: Literal["gauge", "counter", "histogram"]
    documentation: str
    labels: tuple[str, ...] = ()
    samples: list[tuple[tuple[str, ...], float]] = field(default_factory=list)
    # A histogram's samples: labels -> (cumulative (upper bound, count) pairs, sum).
    buckets: list[tuple[tuple[str, ...], list[tuple[str, float]], float]] = field(
        default_factory=list
    )


def families(now: datetime | None = None) -> list[Family]:
    """Read every metric from the database, ages measured from ``now`` (default: the
    engine's clock, so the test harness's virtual time applies)."""
    now = now or clock_now()
    return [
        _instances(),
        _queued(),
        _oldest(now),
        *_deliveries(now),
        _clusters(now),
        *_attempts(),
        _attempt_durations(),
        _wake_lags(),
    ]


def text() -> bytes:
    """The metrics in Prometheus's text format.

    Raises ImportError without ``prometheus-client``.
    """
    # Late: prometheus-client is an optional extra; this module imports without it (the
    # view then answers 501), so its names are only imported when metrics are rendered.
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
    )
    from prometheus_client.registry import Collector

    class DatabaseCollector(Collector):
        """Yields :func:`families` afresh on every collect (one scrape, one read)."""

        def collect(self) -> Iterable[Metric]:
            for family in families():
                metric: GaugeMetricFamily | CounterMetricFamily | HistogramMetricFamily
                if family.kind == "histogram":
                    metric = HistogramMetricFamily(
                        family.name, family.documentation, labels=family.labels
                    )
                    for values, buckets, total in family.buckets:
                        metric.add_metric(list(values), buckets, total)
                    yield metric
                    continue
                if family.kind == "counter":
                    metric = CounterMetricFamily(
                        family.name, family.documentation, labels=family.labels
                    )
                else:
                    metric = GaugeMetricFamily(
                        family.name, family.documentation, labels=family.labels
                    )
                for values, value in family.samples:
                    metric.add_metric(list(values), value)
                yield metric

    # A private registry: the global one would mix in this process's own collectors.
    private = CollectorRegistry(auto_describe=False)
    private.register(DatabaseCollector())
    return generate_latest(private)


def view(request: HttpRequest) -> HttpResponse:
    """Answer a scrape: 403 unless :func:`allowed`, 501 without ``prometheus-client``."""
    if not allowed(request):
        return HttpResponse(
            "Forbidden: the metrics are for staff users, a bearer token "
            "(WORKERFLOW_METRICS_TOKEN) or WORKERFLOW_METRICS_ALLOW.\n",
            status=403,
            content_type="text/plain; charset=utf-8",
        )
    try:
        # Late, for the same reason as in text(): the optional extra.
        from prometheus_client import CONTENT_TYPE_LATEST
    except ImportError:
        return HttpResponse(MISSING_EXTRA, status=501, content_type="text/plain; charset=utf-8")
    return HttpResponse(text(), content_type=CONTENT_TYPE_LATEST)


def allowed(request: HttpRequest) -> bool:
    """An active staff user, ``Authorization: Bearer <WORKERFLOW_METRICS_TOKEN>``, or
    ``WORKERFLOW_METRICS_ALLOW(request)`` returning true."""
    user = getattr(request, "user", None)
    if user is not None and user.is_active and user.is_staff:
        return True
    token = settings.METRICS_TOKEN
    header = request.headers.get("Authorization", "")
    if token and header.startswith("Bearer "):
        given = header.removeprefix("Bearer ").strip()
        if hmac.compare_digest(given.encode(), token.encode()):
            return True
    allow = settings.METRICS_ALLOW
    return bool(allow and import_string(allow)(request))


# The families -------------------------------------------------------------------------


def _instances() -> Family:
    rows = (
        WorkflowInstance.objects.order_by()
        .values_list("definition_name", "status")
        .annotate(count=Count("id"))
    )
    return Family(
        "workerflow_instances",
        "gauge",
        "Instances by definition and status.",
        ("definition", "status"),
        [((name, status), count) for name, status, count in rows],
    )


def _queued() -> Family:
    rows = (
        WorkflowInstance.objects.filter(status=WorkflowStatus.PENDING, admitted_at__isnull=True)
        .order_by()
        .values_list("definition_name")
        .annotate(count=Count("id"))
    )
    return Family(
        "workerflow_queued_instances",
        "gauge",
        "Pending instances waiting for a slot (max_concurrency or a rate limit).",
        ("definition",),
        [((name,), count) for name, count in rows],
    )


def _oldest(now: datetime) -> Family:
    oldest: dict[str, datetime | None] = {"pending": None, "running": None, "no_worker": None}
    rows = (
        WorkflowInstance.objects.filter(status__in=ACTIVE_STATUSES)
        .order_by()
        .values_list("status", "definition_name", "definition_version")
        .annotate(oldest=Min("created_at"))
    )
    for status, name, version, created in rows:
        candidates = [str(status)]
        if registry.lookup(name, version) is None:
            candidates.append("no_worker")
        for candidate in candidates:
            current = oldest[candidate]
            oldest[candidate] = created if current is None else min(current, created)
    return Family(
        "workerflow_oldest_instance_age_seconds",
        "gauge",
        "Seconds since the oldest pending or running instance was created; no_worker: "
        "the oldest of those whose definition and version this process does not know "
        "(0 when there is none).",
        ("status",),
        [((status,), _age(now, created)) for status, created in oldest.items()],
    )


def _deliveries(now: datetime) -> Iterator[Family]:
    summary = (
        FinishDelivery.objects.pending()
        .order_by()
        .aggregate(count=Count("id"), oldest=Min("created_at"))
    )
    yield Family(
        "workerflow_finish_deliveries_pending",
        "gauge",
        "on_finish deliveries not yet acknowledged.",
        samples=[((), summary["count"])],
    )
    yield Family(
        "workerflow_finish_delivery_oldest_age_seconds",
        "gauge",
        "Seconds since the oldest unacknowledged on_finish delivery was created (0: none).",
        samples=[((), _age(now, summary["oldest"]))],
    )


def _clusters(now: datetime) -> Family:
    rows = WorkerHeartbeat.objects.order_by("queue").values_list("queue", "beat_at")
    return Family(
        "workerflow_cluster_last_report_age_seconds",
        "gauge",
        "Seconds since a worker of the cluster (its task queue) last ran the sweeper.",
        ("cluster",),
        [((queue,), _age(now, beat_at)) for queue, beat_at in rows],
    )


def _attempts() -> Iterator[Family]:
    rows = (
        StepEvent.objects.filter(
            type__in=[
                StepEventType.ATTEMPT_STARTED,
                StepEventType.ATTEMPT_SUCCEEDED,
                StepEventType.ATTEMPT_FAILED,
            ]
        )
        .order_by()
        .values_list("instance__definition_name", "step__type", "type")
        .annotate(
            count=Count("id"),
            interrupted=Count("id", filter=Q(error_name=INTERRUPTED_ERROR_NAME)),
        )
    )
    started: list[tuple[tuple[str, ...], float]] = []
    finished: list[tuple[tuple[str, ...], float]] = []
    for name, step_type, event_type, count, interrupted in rows:
        if event_type == StepEventType.ATTEMPT_STARTED:
            started.append(((name, step_type), count))
        elif event_type == StepEventType.ATTEMPT_SUCCEEDED:
            finished.append(((name, step_type, "succeeded"), count))
        else:
            if count - interrupted:
                finished.append(((name, step_type, "failed"), count - interrupted))
            if interrupted:
                finished.append(((name, step_type, "interrupted"), interrupted))
    yield Family(
        "workerflow_step_attempts_started",
        "counter",
        "Step attempts started (counted from the step events: a purge lowers it).",
        ("definition", "step_type"),
        started,
    )
    yield Family(
        "workerflow_step_attempts_finished",
        "counter",
        "Step attempts finished, by outcome (counted from the step events: a purge lowers it).",
        ("definition", "step_type", "outcome"),
        finished,
    )


# Upper bounds of the attempt duration histogram, in seconds (prometheus-client's defaults).
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
# Of the wake lag histogram: a precise bell is a few tens of ms late, a lost one minutes.
LAG_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


def _attempt_durations() -> Family:
    """Each finished attempt's time from its ``attempt_started`` event to its outcome."""
    # A join (not a correlated subquery, which each bucket's FILTER would evaluate again):
    # the outcome event to its step's attempt_started event of the same attempt number.
    started = FilteredRelation(
        "step__events",
        condition=Q(
            step__events__type=StepEventType.ATTEMPT_STARTED,
            step__events__attempt_number=F("attempt_number"),
        ),
    )
    events = (
        StepEvent.objects.filter(
            type__in=[StepEventType.ATTEMPT_SUCCEEDED, StepEventType.ATTEMPT_FAILED]
        )
        .annotate(start=started)
        .filter(start__recorded_at__isnull=False)
    )
    return Family(
        "workerflow_step_attempt_duration_seconds",
        "histogram",
        "Seconds from a step attempt's start to its outcome (counted from the step events: "
        "a purge lowers it).",
        ("definition",),
        buckets=_bucketed(events, "start__recorded_at", DURATION_BUCKETS, ()),
    )


def _wake_lags() -> Family:
    """How late sleeps woke (``models.WAKE_LAG``, as the overview reads it): a sleep's due
    time to the tick that recorded it elapsed. The other causes are not recorded in a form
    to count yet."""
    events = StepEvent.objects.woken_sleeps()
    return Family(
        "workerflow_wake_lag_seconds",
        "histogram",
        "Seconds from a due time to the tick that acted on it, by cause (sleep only, so "
        "far; counted from the step events: a purge lowers it).",
        ("definition", "cause"),
        buckets=_bucketed(events, WAKE_LAG_SINCE, LAG_BUCKETS, ("sleep",)),
    )


def _bucketed(
    events: QuerySet[StepEvent], since: str, bounds: tuple[float, ...], extra: tuple[str, ...]
) -> list[tuple[tuple[str, ...], list[tuple[str, float]], float]]:
    """Per definition, how many ``events`` were recorded at most each bound after the
    field ``since``, and the sum of those times: one grouped query, a count per bound."""
    elapsed = ExpressionWrapper(F("recorded_at") - F(since), output_field=DurationField())
    counts = {
        f"le_{index}": Count("id", filter=Q(recorded_at__lte=F(since) + timedelta(seconds=bound)))
        for index, bound in enumerate(bounds)
    }
    rows = (
        events.order_by()
        .values("instance__definition_name")
        .annotate(count=Count("id"), total=Sum(elapsed), **counts)
    )
    buckets: list[tuple[tuple[str, ...], list[tuple[str, float]], float]] = []
    for grouped in rows:
        row: dict[str, Any] = dict(grouped)  # the bucket keys are built, not literal
        cumulative = [(str(bound), float(row[f"le_{index}"])) for index, bound in enumerate(bounds)]
        cumulative.append(("+Inf", float(row["count"])))
        total = row["total"] or timedelta(0)
        labels = (row["instance__definition_name"], *extra)
        buckets.append((labels, cumulative, max(0.0, total.total_seconds())))
    return buckets


def _age(now: datetime, then: datetime | None) -> float:
    return 0.0 if then is None else max(0.0, (now - then).total_seconds())
