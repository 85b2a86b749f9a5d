"""The Prometheus metrics view and ``manage.py workerflow metrics``: who may scrape, the text
format, the gauges read from the database and the counters and histograms this process
observed (docs/metrics.md). Each test defines workflows of its own, so the counts the
process kept for earlier tests do not show in its labels."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.http import HttpRequest
from django.test import Client, RequestFactory, override_settings

import django_workerflow as workerflow
import django_workerflow.metrics
from django_workerflow import WorkflowDefinition
from django_workerflow.models import (
    FinishDelivery,
    WorkerHeartbeat,
    WorkflowInstance,
)
from django_workerflow.testing import Harness
from tests.metrics.scraping import TOKEN, URL, parse, scrape, value
from tests.support.failures import WorkerDiedError, dies_once
from tests.support.instances import lease_runs_out

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.metrics.scraping")]

T0 = datetime(2026, 12, 1, 14, 3, 0, tzinfo=UTC)
PROMETHEUS_TEXT = "text/plain; version="


def allow_from_header(request: HttpRequest) -> bool:
    """The WORKERFLOW_METRICS_ALLOW callable of the tests."""
    return request.headers.get("X-Scraper") == "yes"


def staff_client(*, is_staff: bool = True, is_active: bool = True) -> Client:
    user = get_user_model().objects.create_user(
        "scraper", password="pw", is_staff=is_staff, is_active=is_active
    )
    client = Client()
    client.force_login(user)
    return client


# Who may scrape ------------------------------------------------------------------------


def test_view__anonymous__is_forbidden():
    assert Client().get(URL).status_code == 403


def test_view__a_non_staff_user__is_forbidden():
    assert staff_client(is_staff=False).get(URL).status_code == 403


def test_view__an_inactive_staff_user__is_forbidden():
    assert staff_client(is_active=False).get(URL).status_code == 403


def test_allowed__an_inactive_staff_user_on_the_request__is_refused():
    """The check itself, without the authentication backend (which already turns an
    inactive user's session into an anonymous one): a custom backend may not."""
    user = get_user_model().objects.create_user("gone", is_staff=True, is_active=False)
    request = RequestFactory().get(URL)
    request.user = user
    assert not django_workerflow.metrics.allowed(request)
    user.is_active = True
    assert django_workerflow.metrics.allowed(request)


@override_settings(WORKERFLOW_METRICS_TOKEN=TOKEN)
def test_view__a_wrong_bearer_token__is_forbidden():
    response = Client().get(URL, headers={"Authorization": "Bearer not-the-token"})
    assert response.status_code == 403


def test_view__any_bearer_token__is_forbidden_when_no_token_is_set():
    assert Client().get(URL, headers={"Authorization": "Bearer "}).status_code == 403


def test_view__a_staff_user__reads_prometheus_text():
    response = staff_client().get(URL)
    assert response.status_code == 200
    assert response["Content-Type"].startswith(PROMETHEUS_TEXT)
    assert "workerflow_instances" in parse(response.content.decode())


@override_settings(WORKERFLOW_METRICS_TOKEN=TOKEN)
def test_view__the_bearer_token__reads_prometheus_text():
    response = Client().get(URL, headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    assert response["Content-Type"].startswith(PROMETHEUS_TEXT)


@override_settings(WORKERFLOW_METRICS_ALLOW=f"{__name__}.allow_from_header")
def test_view__the_allow_callable__decides():
    assert Client().get(URL, headers={"X-Scraper": "yes"}).status_code == 200
    assert Client().get(URL, headers={"X-Scraper": "no"}).status_code == 403


def test_view__without_prometheus_client__answers_501_naming_the_extra(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import now fails
    response = staff_client().get(URL)
    assert response.status_code == 501
    assert "django-workerflow[metrics]" in response.content.decode()


# What the metrics say ------------------------------------------------------------------


def test_scrape__counts_instances_by_definition_and_status_and_the_queue(define_with):
    definition = define_with(max_concurrency=2)

    def boom(self: WorkflowDefinition) -> None:
        self.run("explode", lambda: 1 / 0, max_attempts=1)

    failing = define_with(execute=boom)
    with Harness(start=T0) as harness:
        for index in range(3):
            workerflow.start(definition, key=f"job-{index}")
        workerflow.start(failing, key="bad")
        harness.drain()
        harness.clock.advance(timedelta(seconds=90))
        workerflow.start(failing, key="admitted-not-yet-run")  # pending, not queued
        families = scrape()
    name = definition.name
    assert value(families, "workerflow_instances", definition=name, status="running") == 2
    assert value(families, "workerflow_instances", definition=name, status="pending") == 1
    assert value(families, "workerflow_instances", definition=failing.name, status="failed") == 1
    assert value(families, "workerflow_queued_instances", definition=name) == 1
    assert value(families, "workerflow_instances", definition=failing.name, status="pending") == 1
    assert value(families, "workerflow_queued_instances", definition=failing.name) is None
    assert value(families, "workerflow_oldest_instance_age_seconds", status="running") == 90
    assert value(families, "workerflow_oldest_instance_age_seconds", status="pending") == 90
    assert value(families, "workerflow_oldest_instance_age_seconds", status="no_worker") == 0
    failed = {"definition": failing.name, "step_type": "run"}
    assert value(families, "workerflow_step_attempts_started", **failed) == 1
    assert value(families, "workerflow_step_attempts_finished", **failed, outcome="failed") == 1


def test_scrape__counters_move_after_a_harness_drain(define_with):
    def two_steps(self: WorkflowDefinition) -> int:
        return self.run("a", lambda: 1) + self.run("b", lambda: 2)

    definition = define_with(execute=two_steps)
    labels = {"definition": definition.name, "step_type": "run"}
    with Harness(start=T0) as harness:
        workerflow.start(definition, key="first")
        before = scrape()
        assert value(before, "workerflow_step_attempts_started", **labels) is None
        harness.drain()
        after = scrape()
        assert value(after, "workerflow_step_attempts_started", **labels) == 2
        assert value(after, "workerflow_step_attempts_finished", **labels, outcome="succeeded") == 2
        workerflow.start(definition, key="second")
        harness.drain()
        assert value(scrape(), "workerflow_step_attempts_started", **labels) == 4


def test_scrape__an_instance_of_an_unknown_version__is_waiting_for_a_worker(define_with):
    definition = define_with()
    with Harness(start=T0) as harness:
        instance = workerflow.start(definition, key="orphan")
        WorkflowInstance.objects.filter(pk=instance.pk).update(definition_version="gone")
        harness.clock.advance(timedelta(minutes=5))
        families = scrape()
    assert value(families, "workerflow_oldest_instance_age_seconds", status="no_worker") == 300


def test_scrape__reports_finish_deliveries_and_cluster_reports(define_with):
    definition = define_with(execute=lambda self: "done", on_finish=lambda *args: None)
    with Harness(start=T0) as harness:
        workerflow.start(definition, key="delivered-later")
        harness.drain()
        WorkerHeartbeat.objects.create(queue="orders", beat_at=T0)
        FinishDelivery.objects.update(acknowledged_at=None, created_at=T0)
        harness.clock.advance(timedelta(seconds=30))
        families = scrape()
    pending = FinishDelivery.objects.pending().count()
    assert pending >= 1
    assert value(families, "workerflow_finish_deliveries_pending") == pending
    assert value(families, "workerflow_finish_delivery_oldest_age_seconds") == 30
    assert value(families, "workerflow_cluster_last_report_age_seconds", cluster="orders") == 30


def test_scrape__labels_never_name_a_key_or_a_step_id(define_with):
    def one(self: WorkflowDefinition) -> int:
        return self.run("secret-step-id", lambda: 1)

    definition = define_with(execute=one)
    with Harness(start=T0) as harness:
        workerflow.start(definition, key="secret-instance-key")
        harness.drain()
        families = scrape()
    text = repr(families)
    assert "secret-instance-key" not in text
    assert "secret-step-id" not in text


def test_command__prints_the_same_families_as_the_view(define_with):
    definition = define_with()
    with Harness(start=T0) as harness:
        workerflow.start(definition, key="one")
        harness.drain()
        out = StringIO()
        call_command("workerflow", "metrics", stdout=out)
        assert parse(out.getvalue()) == scrape()


def test_scrape__an_interrupted_attempt__counts_as_interrupted_not_failed(define_with):
    crash = dies_once()

    def crashy(self: WorkflowDefinition) -> str:
        return self.run("crashy", crash, max_attempts=2)

    definition = define_with(execute=crashy)
    with Harness(start=T0) as harness:
        workerflow.start(definition, key="crashed")
        with pytest.raises(WorkerDiedError):
            harness.drain()
        lease_runs_out(harness)  # the take-over records the attempt as interrupted
        families = scrape()
    labels = {"definition": definition.name, "step_type": "run"}
    finished = "workerflow_step_attempts_finished"
    assert value(families, finished, **labels, outcome="interrupted") == 1
    assert value(families, finished, **labels, outcome="succeeded") == 1
    assert value(families, finished, **labels, outcome="failed") is None
    assert value(families, "workerflow_step_attempts_started", **labels) == 2


def test_scrape__has_only_workerflow_families_not_the_process_registry():
    assert all(name.startswith("workerflow_") for name in scrape())


def test_command__without_prometheus_client__fails_naming_the_extra(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import now fails
    with pytest.raises(CommandError, match=r"django-workerflow\[metrics\]"):
        call_command("workerflow", "metrics", stdout=StringIO())


def test_scrape__attempt_durations__are_bucketed_from_start_to_outcome(define_with):
    with Harness(start=T0) as harness:

        def take(seconds: float) -> float:
            harness.clock.advance(timedelta(seconds=seconds))
            return seconds

        def slow_steps(self: WorkflowDefinition) -> None:
            for step_id, seconds in [("quick", 0.3), ("slow", 3.0)]:
                self.run(step_id, lambda s=seconds: take(s))

        definition = define_with(execute=slow_steps)
        workerflow.start(definition, key="timed")
        harness.drain()
        families = scrape()
    name = "workerflow_step_attempt_duration_seconds"
    samples = families[name]

    def bucket(le: str) -> float:
        return samples[(f"{name}_bucket", (("definition", definition.name), ("le", le)))]

    assert (bucket("0.25"), bucket("0.5"), bucket("2.5"), bucket("5.0"), bucket("+Inf")) == (
        0,
        1,
        1,
        2,
        2,
    )
    assert samples[(f"{name}_count", (("definition", definition.name),))] == 2
    assert samples[(f"{name}_sum", (("definition", definition.name),))] == pytest.approx(3.3)


def test_scrape__attempt_durations__pair_each_outcome_with_its_own_attempt(define_with):
    def flaky(self: WorkflowDefinition) -> None:
        self.run("charge", lambda: 1 / 0, max_attempts=3)

    definition = define_with(execute=flaky)
    with Harness(start=T0) as harness:
        workerflow.start(definition, key="retried")
        harness.drain()
        harness.advance(timedelta(minutes=5))
        families = scrape()
    name = "workerflow_step_attempt_duration_seconds"
    labels = (("definition", definition.name),)
    assert (
        value(
            families,
            "workerflow_step_attempts_started",
            definition=definition.name,
            step_type="run",
        )
        == 3
    )
    assert families[name][(f"{name}_count", labels)] == 3


def test_scrape__wake_lag__is_the_sleeps_due_time_to_the_tick_that_woke_it(define_with):
    def nap(self: WorkflowDefinition) -> None:
        self.sleep("nap", timedelta(seconds=10))

    definition = define_with(execute=nap)
    with Harness(start=T0) as harness:
        workerflow.start(definition, key="sleeper")
        harness.drain()
        harness.clock.advance(timedelta(seconds=13))  # the worker was 3 s late
        harness.drain()
        families = scrape()
    name = "workerflow_wake_lag_seconds"
    labels = (("cause", "sleep"), ("definition", definition.name))
    samples = families[name]
    assert samples[(f"{name}_bucket", (*labels, ("le", "2.5")))] == 0
    assert samples[(f"{name}_bucket", (*labels, ("le", "5.0")))] == 1
    assert samples[(f"{name}_count", labels)] == 1
    assert samples[(f"{name}_sum", labels)] == pytest.approx(3.0)
