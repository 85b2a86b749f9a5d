"""``USE_TZ`` both ways: a task's times are the project's datetimes (aware with ``USE_TZ``,
naive in ``TIME_ZONE`` without), ``run_after`` is honoured at the instant it names, and the
engine's own rows stay in UTC. ``override_settings`` is sound here: Django's
``setting_changed`` receiver resets each connection's time zone (PostgreSQL's session too)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.test import override_settings

from django_workerflow.models import WorkflowInstance
from django_workerflow.testing import Harness
from tests.clusterapp import tasks as cluster_tasks

from . import tasks
from .framework import FAILED, READY, SUCCESSFUL, InvalidTask, default_task_backend

#: Five hours behind UTC in winter: a time read in the wrong zone is off by hours.
ZONE = "America/New_York"
T0 = datetime(2030, 1, 15, 12, 0, tzinfo=UTC)


def local(moment: datetime) -> datetime:
    """``moment`` as a project without ``USE_TZ`` writes it: naive, in ``ZONE``."""
    return moment.astimezone(ZoneInfo(ZONE)).replace(tzinfo=None)


@pytest.fixture
def naive_project(db: None) -> Iterator[Harness]:
    """A project with ``USE_TZ = False`` and a ``TIME_ZONE`` that is not UTC, on the harness."""
    with override_settings(USE_TZ=False, TIME_ZONE=ZONE), Harness(start=T0) as harness:
        yield harness


def test_use_tz_false__a_task_s_times_are_naive_in_the_project_s_zone(naive_project):
    result = tasks.meaning_of_life.enqueue()
    assert result.enqueued_at == local(T0)

    naive_project.advance(timedelta(seconds=5))
    result.refresh()

    assert result.status == SUCCESSFUL
    assert result.enqueued_at == local(T0)
    assert result.started_at == result.last_attempted_at == local(T0)
    assert result.finished_at == local(T0)
    assert result.return_value == 42


def test_use_tz_false__a_failed_task_s_finish_is_in_the_project_s_zone(naive_project):
    result = tasks.fails_with_value_error.enqueue()
    naive_project.drain()
    result.refresh()

    assert result.status == FAILED
    assert result.finished_at == local(T0)


def test_use_tz_false__a_naive_run_after_is_the_project_s_local_time(naive_project, tmp_path):
    when = local(T0 + timedelta(hours=2))
    result = cluster_tasks.stamp.using(run_after=when).enqueue(str(tmp_path / "stamp"))
    assert result.task.run_after == when

    naive_project.advance(timedelta(hours=1, minutes=59, seconds=59))
    result.refresh()
    assert result.status == READY
    naive_project.advance(timedelta(seconds=1))
    result.refresh()

    assert result.status == SUCCESSFUL
    assert result.started_at == when
    assert default_task_backend.get_result(result.id).task.run_after == when


def test_use_tz_false__the_engine_s_rows_stay_in_utc(naive_project):
    result = tasks.meaning_of_life.enqueue()
    naive_project.drain()

    instance = WorkflowInstance.objects.get(key=result.id)

    assert instance.created_at == instance.finished_at == T0
    assert instance.finished_at.tzinfo is not None


def test_use_tz_true__a_task_s_times_are_aware(harness):
    result = tasks.meaning_of_life.enqueue()
    harness.drain()
    result.refresh()

    assert result.enqueued_at == result.finished_at == harness.now()
    assert result.finished_at.tzinfo is not None


def test_use_tz_true__a_naive_run_after_is_invalid(db):
    with pytest.raises(InvalidTask, match="run_after must be an aware datetime"):
        tasks.noop.using(run_after=datetime(2030, 1, 1))
