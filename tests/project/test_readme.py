"""The README's examples run as written, on the test database, under the test harness."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import django_workerflow as workerflow
from django_workerflow import registry
from django_workerflow.models import WorkflowInstance, WorkflowStatus

pytestmark = pytest.mark.django_db

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_block(marker: str) -> str:
    """The fenced Python block right after ``<!-- marker -->`` in the README."""
    match = re.search(
        rf"<!-- {re.escape(marker)} -->\n```python\n(.*?)\n```", README.read_text(), re.DOTALL
    )
    assert match, f"README.md has no ```python block right after <!-- {marker} -->"
    return match.group(1)


@pytest.fixture
def readme_example(workerflow_harness) -> Iterator[dict[str, Any]]:
    """Run the README's main example; yield its namespace. Unregisters its definition."""
    namespace: dict[str, Any] = {"__name__": "readme_example"}
    try:
        exec(compile(readme_block("readme-example"), str(README), "exec"), namespace)
        exec(compile(readme_block("readme-start"), str(README), "exec"), namespace)
        yield namespace
    finally:
        if "Onboarding" in namespace:
            registry.unregister(namespace["Onboarding"])


def test_readme_example__completes_with_the_survey_answer(
    readme_example, workerflow_harness, mailoutbox
):
    instance = readme_example["instance"]
    assert instance.key == "user-42"
    assert instance.definition_version == "2026-03-19"

    workerflow_harness.drain()
    assert len(mailoutbox) == 1
    assert mailoutbox[0].to == ["42@example.com"]

    workerflow_harness.advance(timedelta(days=3))
    workerflow.send_event("user-42", "survey.answered", {"score": 9})
    workerflow_harness.drain()

    instance.refresh_from_db()
    assert instance.status == WorkflowStatus.COMPLETED
    assert instance.result == {"answer": {"score": 9}}
    assert len(mailoutbox) == 1, "the welcome email must be sent once, not once per replay"
    assert list(instance.steps.values_list("step_id", "state")) == [
        ("send-welcome", "succeeded"),
        ("three-days", "elapsed"),
        ("survey", "satisfied"),
    ]


def test_readme_example__control_block_runs_against_the_running_instance(
    readme_example, workerflow_harness
):
    workerflow_harness.drain()  # the instance is running, asleep for three days

    exec(compile(readme_block("readme-control"), str(README), "exec"), readme_example)

    instance = WorkflowInstance.objects.get(key="user-42")
    assert instance.status == WorkflowStatus.CANCELLED
    assert list(instance.workflow_events.values_list("type", "reason")) == [
        ("created", None),
        ("started", None),
        ("paused", None),
        ("resumed", None),
        ("cancelled", "user deleted"),
    ]
    assert list(instance.inbound_events.values_list("event_name", "payload")) == [
        ("survey.answered", {"score": 9})
    ]


def test_readme_example__the_workflows_module_starts_nothing_at_import():
    """Pasted as labelled, a module that called start() at import would break `migrate` on
    a fresh database (the app registry imports it before the tables exist)."""
    module = readme_block("readme-example")
    assert module.startswith("# myapp/workflows.py")
    assert "start(" not in module.replace("start() is called with", "")
