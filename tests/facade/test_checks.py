"""System checks: each warns about a setting that breaks the engine, with an id and a hint."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.test import override_settings

from django_workerflow import WorkflowDefinition, checks, registry
from django_workerflow.checks import (
    check_connection_reuse,
    check_definition_modules,
    check_sqlite_database,
    check_step_timeouts,
    check_worker_settings,
)

RECOMMENDED = {
    "name": "workerflow",
    "orm": "default",
    "timeout": 60,
    "retry": 90,
    "max_attempts": 3,
    "poll": 0.05,
}
SQLITE_OK = {
    "ENGINE": "django.db.backends.sqlite3",
    "NAME": "db.sqlite3",
    "OPTIONS": {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL;",
    },
}


def ids(q_cluster=RECOMMENDED) -> list[str]:
    with override_settings(Q_CLUSTER=q_cluster):
        return [warning.id for warning in check_worker_settings()]


def test_checks__recommended_settings_raise_nothing():
    assert ids() == []


def test_checks__the_test_project_passes_its_own_checks():
    assert check_worker_settings() == []


def test_checks__warn_when_django_q_is_not_installed():
    with override_settings(INSTALLED_APPS=["django_workerflow"]):
        warnings = check_worker_settings()
    assert [warning.id for warning in warnings] == ["workerflow.W001"]
    assert "qcluster" in warnings[0].hint


@pytest.mark.parametrize(
    ("q_cluster", "expected"),
    [
        ({**RECOMMENDED, "timeout": None}, "workerflow.W002"),
        ({**RECOMMENDED, "retry": 60}, "workerflow.W003"),
        ({**RECOMMENDED, "max_attempts": 0}, "workerflow.W004"),
        ({**RECOMMENDED, "timeout": 10, "retry": 20}, "workerflow.W005"),
        ({key: value for key, value in RECOMMENDED.items() if key != "orm"}, "workerflow.W006"),
        ({**RECOMMENDED, "orm": "other"}, "workerflow.W007"),
    ],
)
def test_checks__warn_about_a_cluster_setting_that_breaks_the_engine(q_cluster, expected):
    assert ids(q_cluster) == [expected]


def test_checks__unlimited_max_attempts_is_the_django_q_default():
    without = {key: value for key, value in RECOMMENDED.items() if key != "max_attempts"}
    assert ids(without) == ["workerflow.W004"]


def test_checks__warn_about_sqlite_without_wal_immediate_and_timeout():
    database = {"ENGINE": "django.db.backends.sqlite3", "NAME": "db.sqlite3"}
    warnings = check_sqlite_database(database)
    assert [warning.id for warning in warnings] == ["workerflow.W008"]
    assert "IMMEDIATE" in warnings[0].hint
    assert "journal_mode=WAL" in warnings[0].hint
    assert "'timeout'" in warnings[0].hint


def test_checks__a_well_configured_sqlite_database_passes():
    assert check_sqlite_database(SQLITE_OK) == []


def test_checks__postgresql_needs_no_sqlite_settings():
    database = {"ENGINE": "django.db.backends.postgresql", "NAME": "x"}
    assert check_sqlite_database(database) == []


def test_checks__warn_about_postgresql_without_connection_reuse():
    database = {"ENGINE": "django.db.backends.postgresql", "NAME": "x"}
    [warning] = check_connection_reuse(database)
    assert warning.id == "workerflow.W009"
    assert "CONN_MAX_AGE = 60" in warning.hint
    assert check_connection_reuse({**database, "CONN_MAX_AGE": 60}) == []


def test_checks__warn_about_sqlite_without_connection_reuse():
    [warning] = check_connection_reuse({**SQLITE_OK, "CONN_MAX_AGE": 0})
    assert warning.id == "workerflow.W009"
    assert "reopens the SQLite database" in warning.msg
    assert "CONN_MAX_AGE = 60" in warning.hint
    assert check_connection_reuse({**SQLITE_OK, "CONN_MAX_AGE": 60}) == []


def test_checks__every_hint_links_to_the_documentation_row_that_explains_its_id(define):
    broken_clusters = [
        {**RECOMMENDED, "timeout": None, "max_attempts": 0, "orm": None},
        {**RECOMMENDED, "retry": 60, "orm": "other"},
        {**RECOMMENDED, "timeout": 10, "retry": 20},
    ]
    warnings = []
    with override_settings(INSTALLED_APPS=["django_workerflow"]):
        warnings += check_worker_settings()
    for q_cluster in broken_clusters:
        with override_settings(Q_CLUSTER=q_cluster):
            warnings += check_worker_settings()
    warnings += check_sqlite_database({"ENGINE": "django.db.backends.sqlite3", "NAME": "x"})
    warnings += check_connection_reuse({"ENGINE": "django.db.backends.postgresql", "NAME": "x"})
    with override_settings():
        del django_settings.Q_CLUSTER
        warnings += check_worker_settings()
    definition = define(lambda self: None)
    definition.__module__ = "testproject.shop.views"  # a module workers do not import
    warnings += [w for w in check_definition_modules() if w.obj is definition]

    assert sorted({warning.id for warning in warnings}) == [
        f"workerflow.W{n:03}" for n in range(1, 12)
    ]
    operations = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    for warning in warnings:
        anchor = warning.id.replace(".", "-").lower()
        assert warning.hint.endswith(f" See {checks.DOCS_URL}#{anchor}."), warning.hint
        assert f'<a id="{anchor}"></a>`{warning.id}`' in operations
        assert f"\n{warning.id}\n" in checks.__doc__


def test_checks__w006_says_how_late_timers_are_without_the_orm_broker():
    q_cluster = {key: value for key, value in RECOMMENDED.items() if key != "orm"}
    with override_settings(Q_CLUSTER=q_cluster):
        [warning] = [w for w in check_worker_settings() if w.id == "workerflow.W006"]
    assert "a 5 s sleep woke 22 s late" in warning.msg
    assert "0.25 s retry backoffs took 30 s" in warning.msg
    assert "15 to 47 s late" in warning.msg
    assert "0.04 s with the ORM broker" in warning.msg


@pytest.mark.parametrize(
    ("step_timeout", "warned"),
    [(60, True), (timedelta(minutes=2), True), (59.5, False), (timedelta(seconds=30), False)],
)
def test_checks__warn_about_a_step_timeout_the_process_timeout_pre_empts(step_timeout, warned):
    class Timed(WorkflowDefinition):
        name = "checks-step-timeout"
        version = "1"

        def execute(self) -> None:
            pass

    Timed.step_timeout = step_timeout
    try:
        with override_settings(Q_CLUSTER=RECOMMENDED):
            warnings = [w for w in check_step_timeouts() if w.obj is Timed]
    finally:
        registry.unregister(Timed)

    assert [w.id for w in warnings] == (["workerflow.W012"] if warned else [])
    if warned:
        assert "'checks-step-timeout'" in warnings[0].msg
        assert "below 60 s" in warnings[0].hint


def test_checks__no_step_timeout_warning_without_a_process_timeout():
    with override_settings(Q_CLUSTER={**RECOMMENDED, "timeout": None}):
        assert check_step_timeouts() == []
