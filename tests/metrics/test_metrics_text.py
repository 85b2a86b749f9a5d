"""The text a scrape answers (metrics.rendered): Prometheus's text exposition format 0.0.4,
byte for byte what prometheus-client's ``generate_latest`` writes for the same families,
and read by prometheus-client's own parser as the same families and samples
(docs/metrics.md)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import prometheus_client
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

import django_workerflow as workerflow
from django_workerflow import WorkflowDefinition, metrics
from django_workerflow.metrics import Family
from django_workerflow.models import WorkerHeartbeat
from django_workerflow.testing import Harness

T0 = datetime(2026, 12, 3, 9, 0, 0, tzinfo=UTC)

#: Label values and help texts that need escaping, and values that need Go's formatting.
AWKWARD = (
    Family(
        "workerflow_awkward",
        "gauge",
        'Help with a back\\slash,\na newline and "quotes".',
        ("definition", "cause"),
        [
            (('back\\slash "quoted"', "new\nline"), 1e22),
            (("plain", ""), 0.1 + 0.2),
            (("plain", "ints"), 7),
            (("plain", "negative"), -2.5),
            (("plain", "infinite"), float("inf")),
        ],
    ),
    Family("workerflow_no_labels", "gauge", "One sample, no labels.", samples=[((), 3)]),
    Family("workerflow_empty", "gauge", "No sample at all.", ("cluster",)),
    Family(
        "workerflow_counted",
        "counter",
        "A counter.",
        ("step_type", "definition", "outcome"),
        [(("run", "d-1", "failed"), 2.0), (("sleep", 'd"2', "succeeded"), 123456789.0)],
    ),
    Family("workerflow_counted_none", "counter", "A counter with no series.", ("definition",)),
    Family(
        "workerflow_timed_seconds",
        "histogram",
        "A histogram.",
        ("definition", "cause"),
        buckets=[
            (("d-1", "sleep"), [("0.05", 1.0), ("2.5", 3.0), ("+Inf", 4.0)], 12.75),
            (("d\n2", "event"), [("0.05", 0.0), ("2.5", 0.0), ("+Inf", 0.0)], 0.0),
        ],
    ),
    Family("workerflow_timed_none_seconds", "histogram", "No series.", ("definition",)),
)


def generate_latest_of(listed: Iterable[Family]) -> bytes:
    """``listed`` rendered by prometheus-client: its metric families in a registry of
    their own, written by ``generate_latest``."""

    class Listed(Collector):
        def collect(self) -> Iterable[Metric]:
            for family in listed:
                metric: GaugeMetricFamily | CounterMetricFamily | HistogramMetricFamily
                if family.kind == "histogram":
                    metric = HistogramMetricFamily(
                        family.name, family.documentation, labels=family.labels
                    )
                    for values, buckets, total in family.buckets:
                        metric.add_metric(list(values), buckets, total)
                    yield metric
                    continue
                kind = CounterMetricFamily if family.kind == "counter" else GaugeMetricFamily
                metric = kind(family.name, family.documentation, labels=family.labels)
                for values, value in family.samples:
                    metric.add_metric(list(values), value)
                yield metric

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Listed())
    return generate_latest(registry)


def parsed(text: bytes) -> list[tuple[str, str, str, list[Any]]]:
    """Each family as prometheus-client's parser reads it: name, type, help, samples."""
    return [
        (family.name, family.type, family.documentation, family.samples)
        for family in text_string_to_metric_families(text.decode())
    ]


def test_rendered__is_byte_for_byte_what_generate_latest_writes():
    assert metrics.rendered(list(AWKWARD)) == generate_latest_of(AWKWARD)


def test_rendered__parses_to_the_families_and_samples_generate_latest_gives():
    mine = parsed(metrics.rendered(list(AWKWARD)))
    assert mine == parsed(generate_latest_of(AWKWARD))
    assert [name for name, *_ in mine] == [
        "workerflow_awkward",
        "workerflow_no_labels",
        "workerflow_empty",
        "workerflow_counted",
        "workerflow_counted_none",
        "workerflow_timed_seconds",
        "workerflow_timed_none_seconds",
    ]


@pytest.mark.django_db
def test_text__is_what_generate_latest_writes_for_the_scrapes_families(define_with):
    def steps(self: WorkflowDefinition) -> None:
        self.run("quick", lambda: 1)
        self.run("flaky", lambda: 1 / 0, max_attempts=2)
        self.sleep("nap", timedelta(seconds=5))

    definition = define_with(execute=steps)
    with Harness(start=T0) as harness:
        workerflow.start(definition, key="rendered")
        workerflow.start(definition, key="rendered-too")
        harness.drain()
        harness.advance(timedelta(minutes=5))
        WorkerHeartbeat.objects.create(queue="orders", beat_at=T0)
        text = metrics.text()
        listed = metrics.families()
    assert any(family.kind == "histogram" and family.buckets for family in listed)
    assert text == generate_latest_of(listed)
    assert parsed(text) == parsed(generate_latest_of(listed))


@pytest.mark.django_db
def test_text__renders_without_prometheus_clients_registry(monkeypatch):
    """The text is written here: a scrape builds no collector and calls no
    ``generate_latest`` (which cost a changed fleet's scrape about 4 ms)."""

    def refuse(*args: Any, **kwargs: Any) -> bytes:
        raise AssertionError("generate_latest was called")

    monkeypatch.setattr(prometheus_client, "generate_latest", refuse)
    monkeypatch.setattr(prometheus_client.exposition, "generate_latest", refuse)
    assert b"# TYPE workerflow_instances gauge" in metrics.text()
