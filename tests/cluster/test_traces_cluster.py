"""Traces across processes: a workflow started inside a span of this test runs in a real
``manage.py qcluster``, whose tick spans (exported to a file, ``tests/clusterapp/spans.py``)
continue the test's trace, and link to the span that sent the event they received."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import django_workerflow as workerflow
from django_workerflow.models import Step
from django_workerflow.values.states import StepState
from tests.support.tracing import Spans

from .conftest import ClusterRunner, wait_until

pytestmark = pytest.mark.cluster


def _spans_of(path: Path, key: str) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    spans = [json.loads(line) for line in path.read_text().splitlines()]
    return [s for s in spans if s["attributes"].get("workerflow.instance_key") == key]


@pytest.mark.slow
def test_cluster_tick__continues_the_trace_of_the_span_that_started_it(
    qcluster: ClusterRunner, spans: Spans, tmp_path: Path
) -> None:
    path = tmp_path / "spans.jsonl"
    qcluster.start(WORKERFLOW_TEST_SPANS_FILE=str(path))
    with spans.tracer.start_as_current_span("POST /journeys") as request:
        instance = workerflow.start("cluster-journey", key="traced", input={"dir": str(tmp_path)})
    wait_until(
        lambda: Step.objects.filter(
            instance=instance, step_id="approval", state=StepState.WAITING
        ).exists(),
        timeout=30,
        what="the journey to wait for its approval",
    )
    with spans.tracer.start_as_current_span("POST /approve") as approve:
        workerflow.send_event(instance, "approved", "yes")
    assert workerflow.wait_result(instance, timeout=30) == {"tries": 2, "approval": "yes"}
    wait_until(
        lambda: any(
            s["attributes"].get("workerflow.tick_outcome") == "completed"
            for s in _spans_of(path, "traced")
        ),
        timeout=10,
        what="the last tick's span in the file",
    )

    traced = _spans_of(path, "traced")
    ticks = [s for s in traced if s["name"] == "workerflow.tick"]
    steps = [s for s in traced if s["name"] == "workerflow.step"]
    started = request.get_span_context()
    assert {t["trace_id"] for t in traced} == {f"{started.trace_id:032x}"}
    assert {t["parent_id"] for t in ticks} == {f"{started.span_id:016x}"}
    assert {s["parent_id"] for s in steps} <= {t["span_id"] for t in ticks}
    attempts = [
        (s["attributes"]["workerflow.step_id"], s["attributes"]["workerflow.attempt"], s["status"])
        for s in steps
    ]
    assert attempts == [("flaky", 1, "ERROR"), ("flaky", 2, "UNSET"), ("finish", 1, "UNSET")]
    (received,) = [t for t in ticks if "workerflow.event" in t["events"]]
    assert received["links"] == [f"{approve.get_span_context().span_id:016x}"]
    assert any("workerflow.sleep" in t["events"] for t in ticks)
    assert any("workerflow.wait" in t["events"] for t in ticks)
