"""Prometheus metrics of the whole fleet: gauges read from the database, counters and
histograms summed over every process's totals, when they are scraped.

Mount the view, ``path("workerflow/metrics", django_workerflow.metrics.view)``; ``manage.py
workerflow metrics`` prints the same text. It needs the optional extra
``django-workerflow[metrics]`` (``prometheus-client``); without it the view answers 501.

The gauges (instances, queues, oldest ages, deliveries, heartbeats) are read from the
database at scrape time. The counters and histograms are kept in each process's memory by
the code that observes them (:mod:`django_workerflow.process_counters`), and each process flushes
its totals to a row of its own (``ProcessMetrics``) every few seconds; a scrape sums every
row, with the scraping process's own totals from memory instead of its row. So a scrape
from the web process sees every cluster and worker process, on every host, and the ticks
run in the scraping process itself (the test harness) count, with no multiprocess
directory and nothing to configure. The rows of dead processes stay, so the counters never
go down; a process that dies loses what it observed since its last flush.

Labels are bounded: definition names, statuses, step types, outcomes, causes and task
queues; never an instance key, a step id or a concurrency key.
"""

from __future__ import annotations

import functools
import hmac
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from django.db.models import Count, Min
from django.http import HttpRequest, HttpResponse
from django.utils.module_loading import import_string

from django_workerflow import process_counters, registry
from django_workerflow.conf import settings
from django_workerflow.models import (
    ACTIVE_STATUSES,
    FinishDelivery,
    WorkerHeartbeat,
    WorkflowInstance,
    WorkflowStatus,
)
from django_workerflow.store import flushed_totals, instance_counts
from django_workerflow.values.clock import now as clock_now
from django_workerflow.values.states import TERMINAL_STATUSES

#: The statuses the ``workerflow_unfinished`` index holds.
UNFINISHED_STATUSES = tuple(status for status in WorkflowStatus if status not in TERMINAL_STATUSES)

__all__ = ["Family", "families", "rendered", "text", "view"]

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
    """Read every metric, ages measured from ``now`` (default: the engine's clock, so the
    test harness's virtual time applies)."""
    return [*_gauges(now), *_counted(flushed_totals.fleet_series())]


def text() -> bytes:
    """The metrics in Prometheus's text format.

    Raises ImportError without ``prometheus-client``.
    """
    # The counters and histograms are most of the text: rendered again only when a
    # process's totals changed (see _counted_text).
    return rendered(_gauges()) + _counted_text(flushed_totals.fleet_series())


def _gauges(now: datetime | None = None) -> list[Family]:
    """The gauges, read from the database."""
    now = now or clock_now()
    unfinished = _unfinished()
    return [
        _instances(unfinished),
        _queued(),
        _oldest(unfinished, now),
        *_deliveries(now),
        _clusters(now),
    ]


@functools.lru_cache(maxsize=1)
def _counted_text(fleet: process_counters.Series) -> bytes:
    """The counters and histograms of ``fleet`` rendered; kept while the fleet's sum is the
    same object (:data:`~django_workerflow.store.flushed_totals.FLEET` keeps it while no
    row changed and this process observed nothing)."""
    return rendered(list(_counted(fleet)))


def rendered(listed: list[Family]) -> bytes:
    """``listed`` in Prometheus's text exposition format (0.0.4), byte for byte as
    prometheus-client's ``generate_latest`` writes it: HELP and TYPE lines, a counter's
    family named with ``_total``, the labels of a sample sorted by name (``le`` among
    them), a histogram's cumulative buckets then ``_count`` then ``_sum``, no ``_created``.

    Written here rather than through a registry and ``generate_latest``, which builds an
    object per sample: ~500 lines cost it 3.7 ms, this 1.1 ms, each time the counters
    changed (every scrape of a fleet of live workers).

    Raises ImportError without ``prometheus-client``.
    """
    # Late: prometheus-client is an optional extra; this module imports without it (the
    # view then answers 501). Its float formatting is kept, so the values read the same.
    from prometheus_client import utils

    # Typed here: prometheus-client does not annotate it.
    value_text: Callable[[float], str] = utils.floatToGoString

    lines: list[str] = []
    for family in listed:
        name = f"{family.name}_total" if family.kind == "counter" else family.name
        lines.append(f"# HELP {name} {_help_escaped(family.documentation)}\n")
        lines.append(f"# TYPE {name} {family.kind}\n")
        if family.kind != "histogram":
            for values, value in family.samples:
                labels = _labels_text(family.labels, values)
                lines.append(f"{name}{labels} {value_text(value)}\n")
            continue
        bucket_labels = (*family.labels, "le")
        for values, buckets, total in family.buckets:
            for bound, count in buckets:
                labels = _labels_text(bucket_labels, (*values, bound))
                lines.append(f"{name}_bucket{labels} {value_text(count)}\n")
            labels = _labels_text(family.labels, values)
            lines.append(f"{name}_count{labels} {value_text(buckets[-1][1])}\n")
            lines.append(f"{name}_sum{labels} {value_text(total)}\n")
    return "".join(lines).encode()


def _help_escaped(documentation: str) -> str:
    return documentation.replace("\\", r"\\").replace("\n", r"\n")


# Kept: a fleet's counters change at every scrape, their label sets (bounded) do not, and
# writing them was two thirds of rendering the counters and histograms.
@functools.lru_cache(maxsize=4096)
def _labels_text(names: tuple[str, ...], values: tuple[str, ...]) -> str:
    """``{name="value",...}`` sorted by name, the values escaped; empty without labels."""
    if not names:
        return ""
    pairs = sorted(zip(names, values, strict=True))
    return "{" + ",".join(f'{label}="{_label_escaped(value)}"' for label, value in pairs) + "}"


def _label_escaped(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


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


#: Unfinished instances per status, definition and version: (count, oldest creation).
Unfinished = dict[tuple[str, str, str], tuple[int, datetime]]


def _unfinished() -> Unfinished:
    """One index-only scan of ``workerflow_unfinished`` (the unfinished instances only,
    however long the history): their counts, and the oldest creation of each group."""
    rows = (
        WorkflowInstance.objects.filter(status__in=UNFINISHED_STATUSES)
        .order_by()
        .values_list("status", "definition_name", "definition_version")
        .annotate(count=Count("*"), oldest=Min("created_at"))
    )
    return {
        (status, name, version): (count, oldest) for status, name, version, count, oldest in rows
    }


def _instances(unfinished: Unfinished) -> Family:
    """The unfinished counted exactly; a large table's large counts of finished instances
    estimated from a sample of its pages (:mod:`~django_workerflow.store.instance_counts`):
    counting a million finished rows exactly costs more than a scrape may."""
    counts: dict[tuple[str, str], int] = {}
    for (status, name, _), (count, _) in unfinished.items():
        counts[(name, status)] = counts.get((name, status), 0) + count
    for key, (count, _) in instance_counts.finished_counts().items():
        counts[key] = count
    return Family(
        "workerflow_instances",
        "gauge",
        "Instances by definition and status (a large count of finished ones is estimated).",
        ("definition", "status"),
        [(key, count) for key, count in sorted(counts.items())],
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


def _oldest(unfinished: Unfinished, now: datetime) -> Family:
    oldest: dict[str, datetime | None] = {"pending": None, "running": None, "no_worker": None}
    for (status, name, version), (_, created) in unfinished.items():
        if status not in ACTIVE_STATUSES:
            continue  # paused: waiting for an operator, not for a worker
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


def _counted(fleet: process_counters.Series) -> Iterator[Family]:
    """The counters and histograms: every process's totals summed (see
    :mod:`django_workerflow.process_counters`)."""
    counters, histograms = fleet.counters, fleet.histograms
    for name, kind_help, labels in COUNTERS:
        samples = sorted(counters.get(name, {}).items())
        yield Family(name, "counter", kind_help, labels, samples)
    for name, kind_help, labels in HISTOGRAMS:
        yield Family(
            name,
            "histogram",
            kind_help,
            labels,
            buckets=[
                _cumulative(key, values, process_counters.BUCKETS[name])
                for key, values in sorted(histograms.get(name, {}).items())
            ],
        )


def _cumulative(
    labels: tuple[str, ...], values: tuple[float, ...], bounds: tuple[float, ...]
) -> tuple[tuple[str, ...], list[tuple[str, float]], float]:
    """A histogram's summed series (buckets, count, sum) as Prometheus's cumulative
    buckets and sum."""
    cumulative: list[tuple[str, float]] = []
    running = 0.0
    for bound, count in zip(bounds, values, strict=False):
        running += count
        cumulative.append((str(bound), running))
    cumulative.append(("+Inf", values[-2]))
    return labels, cumulative, values[-1]


#: The counters: name (without ``_total``), help, labels.
COUNTERS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        process_counters.ATTEMPTS_STARTED,
        "Step attempts started.",
        ("definition", "step_type"),
    ),
    (
        process_counters.ATTEMPTS_FINISHED,
        "Step attempts finished, by outcome (succeeded, failed, interrupted).",
        ("definition", "step_type", "outcome"),
    ),
)
#: The histograms: name, help, labels.
HISTOGRAMS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        process_counters.ATTEMPT_DURATION,
        "Seconds a step attempt's callback ran, to its success or failure.",
        ("definition",),
    ),
    (
        process_counters.TICK_DURATION,
        "Seconds a tick took, from claiming the instance to settling it.",
        ("definition",),
    ),
    (
        process_counters.WAKE_LAG,
        "Seconds from a due time to the start of the tick woken for it, by cause (start, "
        "sleep, retry, event, child, schedule).",
        ("definition", "cause"),
    ),
)


def _age(now: datetime, then: datetime | None) -> float:
    return 0.0 if then is None else max(0.0, (now - then).total_seconds())
