"""A scrape during a running ``manage.py qcluster``: the counters and histograms include the
work its worker processes did (flushed to their process metrics rows), not only this
process's, which runs no tick here (docs/metrics.md)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from django.test import Client, override_settings
from prometheus_client.parser import text_string_to_metric_families

import django_workerflow as workerflow
from django_workerflow.models import ProcessMetrics, Step
from django_workerflow.process_counters import PROCESS_COUNTERS
from django_workerflow.values.states import StepState

from .conftest import ClusterRunner, wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.urls("tests.metrics.scraping")]

TOKEN = "cluster-scrape-token"
JOURNEY = "cluster-journey"


def scrape() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape through the view: (name, sorted labels) -> value."""
    with override_settings(WORKERFLOW_METRICS_TOKEN=TOKEN):
        response = Client().get("/workerflow/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


def sample(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def journey_counted(samples: dict[Any, float]) -> bool:
    """The whole journey's counts have been flushed by the workers."""
    run = {"definition": JOURNEY, "step_type": "run"}
    finished = "workerflow_step_attempts_finished_total"
    lag = "workerflow_wake_lag_seconds_count"
    return (
        sample(samples, "workerflow_step_attempts_started_total", **run) == 3
        and sample(samples, finished, **run, outcome="succeeded") == 2
        and all(sample(samples, lag, definition=JOURNEY, cause=cause) >= 1 for cause in CAUSES)
        and sample(samples, "workerflow_tick_duration_seconds_count", definition=JOURNEY) >= 4
    )


#: The journey's wakes: started, its first attempt retried, its nap, the approval event.
CAUSES = ("start", "retry", "sleep", "event")


@pytest.mark.slow
def test_scrape__during_a_running_cluster__counts_the_workers_work(
    qcluster: ClusterRunner, tmp_path: Path
) -> None:
    qcluster.start(WORKERFLOW_SWEEP_SECONDS="1")
    before = scrape()
    assert sample(before, "workerflow_step_attempts_started_total", definition=JOURNEY) == 0
    instance = workerflow.start(JOURNEY, key="scraped", input={"dir": str(tmp_path)})
    wait_until(
        lambda: Step.objects.filter(
            instance=instance, step_id="approval", state=StepState.WAITING
        ).exists(),
        timeout=30,
        what="the journey to wait for its approval",
    )
    # Mid-run: the retried step and the sleep are counted already.
    midway = wait_until(
        lambda: (
            (s := scrape())
            and sample(
                s,
                "workerflow_step_attempts_finished_total",
                definition=JOURNEY,
                step_type="run",
                outcome="failed",
            )
            == 1
            and s
        ),
        timeout=30,
        what="the failed first attempt to be flushed by its worker",
    )
    assert (
        sample(midway, "workerflow_wake_lag_seconds_count", definition=JOURNEY, cause="sleep") == 1
    )
    workerflow.send_event(instance, "approved", "yes")
    assert workerflow.wait_result(instance, timeout=30) == {"tries": 2, "approval": "yes"}
    samples = wait_until(
        lambda: (s := scrape()) and journey_counted(s) and s,
        timeout=30,
        what="the journey's counts to be flushed by the workers",
    )

    run = {"definition": JOURNEY, "step_type": "run"}
    finished = "workerflow_step_attempts_finished_total"
    assert sample(samples, finished, **run, outcome="failed") == 1
    assert sample(samples, finished, **run, outcome="interrupted") == 0
    assert (
        sample(samples, "workerflow_step_attempt_duration_seconds_count", definition=JOURNEY) == 3
    )
    # The nap is a one-second sleep: its tick came a little after it, well within 5 s.
    assert (
        sample(
            samples,
            "workerflow_wake_lag_seconds_bucket",
            definition=JOURNEY,
            cause="sleep",
            le="5.0",
        )
        == 1
    )
    # The workers did it: their rows hold it, and this process observed none of it.
    workers = ProcessMetrics.objects.exclude(pid=os.getpid())
    assert workers.exists()
    assert not any(
        labels[0] == JOURNEY for series in PROCESS_COUNTERS.counters.values() for labels in series
    )
    assert PROCESS_COUNTERS.process not in set(
        ProcessMetrics.objects.values_list("process", flat=True)
    )
