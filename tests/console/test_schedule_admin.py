"""The console's schedules: disable, enable and run now, and instances filtered by schedule."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

import django_workerflow as workerflow
from django_workerflow.models import WorkflowInstance, WorkflowSchedule
from django_workerflow.runtime.flow import schedules
from django_workerflow.testing import Harness
from tests.support.admin import changelist_url, text

pytestmark = pytest.mark.django_db
SCHEDULES = reverse("admin:workerflow_workflowschedule_changelist")
T0 = datetime(2026, 11, 30, 12, tzinfo=UTC)


@pytest.fixture
def nightly_schedule(define_with):
    definition = define_with(lambda self: None, name="nightly", schedule="0 3 * * *")
    with Harness(start=T0, schedules=["nightly"]) as harness:
        harness.advance(timedelta(days=1))
        yield definition


def post_action(client, action: str, names: list[str]):
    pks = WorkflowSchedule.objects.filter(name__in=names).values_list("pk", flat=True)
    data = {"action": action, "_selected_action": [str(pk) for pk in pks]}
    return client.post(SCHEDULES, data, follow=True)


def test_schedule_changelist__lists_cron_time_zone_and_runs(admin_client, nightly_schedule):
    page = text(admin_client.get(SCHEDULES))
    for words in ["nightly", "0 3 * * *", "UTC"]:
        assert words in page


def test_disable_and_enable_actions__change_the_schedule(admin_client, nightly_schedule):
    post_action(admin_client, "disable_selected", ["nightly"])
    assert WorkflowSchedule.objects.get(name="nightly").enabled is False
    response = post_action(admin_client, "enable_selected", ["nightly"])
    assert "1 schedule(s) enabled." in text(response)
    assert WorkflowSchedule.objects.get(name="nightly").enabled is True


def test_run_now_action__starts_a_manual_instance(admin_client, nightly_schedule):
    response = post_action(admin_client, "run_now_selected", ["nightly"])
    manual = WorkflowInstance.objects.get(key__startswith="nightly@manual-")
    assert f"Started 1: {manual.key}." in text(response)


def test_run_now__needs_the_run_permission(client, django_user_model, nightly_schedule):
    user = django_user_model.objects.create_user("viewer", password="x", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(
            codename__in=["view_workflowschedule", "change_workflowschedule"]
        )
    )
    client.force_login(user)
    post_action(client, "run_now_selected", ["nightly"])
    assert not WorkflowInstance.objects.filter(key__startswith="nightly@manual-").exists()


def test_instance_changelist__filters_by_schedule(admin_client, nightly_schedule, define_with):
    other = define_with(lambda self: None, name="other")
    with Harness(start=T0 + timedelta(days=1)):
        schedules.run_now("nightly")
        workerflow.start(other, key="nightly@not-a-schedule-run")
    page = text(admin_client.get(changelist_url(schedule="nightly")))
    assert "nightly@2026-12-01T03:00:00+00:00" in page
    assert "nightly@manual-" in page
    assert "nightly@not-a-schedule-run" not in page
