"""System checks (``manage.py check``) for settings that break the engine.

Every check has an id and a hint; docs/operations.md lists them.
"""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.conf import settings as django_settings
from django.core.checks import Tags, Warning, register

from .conf import settings


def _q_cluster() -> dict[str, Any]:
    return getattr(django_settings, "Q_CLUSTER", {}) or {}


@register(Tags.compatibility)
def check_worker_settings(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    if not apps.is_installed("django_q"):
        return [
            Warning(
                "django_q is not in INSTALLED_APPS, so no worker will ever run a workflow.",
                hint="Add 'django_q' to INSTALLED_APPS and run `manage.py qcluster`.",
                id="workerflow.W001",
            )
        ]
    conf = _q_cluster()
    errors = []
    timeout = conf.get("timeout")
    retry = conf.get("retry", 60)
    if timeout is None:
        errors.append(
            Warning(
                "Q_CLUSTER has no 'timeout': a step callback that hangs holds its worker forever.",
                hint="Set Q_CLUSTER['timeout'] (e.g. 60) and 'retry' above it (e.g. 90).",
                id="workerflow.W002",
            )
        )
    elif retry <= timeout:
        errors.append(
            Warning(
                f"Q_CLUSTER 'retry' ({retry}) is not above 'timeout' ({timeout}): django-q2 "
                "hands a task that is still running to a second worker after 'retry' seconds.",
                hint="Set Q_CLUSTER['retry'] to 'timeout' plus the longest queue wait, e.g. "
                "timeout 60 and retry 90.",
                id="workerflow.W003",
            )
        )
    if conf.get("max_attempts", 0) == 0:
        errors.append(
            Warning(
                "Q_CLUSTER 'max_attempts' is 0 (unlimited): a task that keeps failing is "
                "redelivered forever.",
                hint="Set Q_CLUSTER['max_attempts'] to 3-5; the sweeper re-rings lost bells.",
                id="workerflow.W004",
            )
        )
    if timeout is not None and timeout <= settings.TICK_BUDGET:
        errors.append(
            Warning(
                f"WORKERFLOW_TICK_BUDGET ({settings.TICK_BUDGET} s) is not below Q_CLUSTER "
                f"'timeout' ({timeout} s): a long workflow's tick is killed before it yields.",
                hint="Keep WORKERFLOW_TICK_BUDGET at a third of the timeout or less.",
                id="workerflow.W005",
            )
        )
    orm = conf.get("orm")
    if orm is None:
        errors.append(
            Warning(
                "Q_CLUSTER does not use the ORM broker, which alone can delay a task: sleeps, "
                "retries and wait timeouts fire only when the sweeper finds them overdue "
                "(15 s to 2 min late), and a bell lost with a crashed worker waits for it too.",
                hint="Set Q_CLUSTER['orm'] = 'default' for timers precise to a tenth of a "
                "second (docs/operations.md, Brokers). Silence this check if the delay is fine.",
                id="workerflow.W006",
            )
        )
    elif orm != "default":
        errors.append(
            Warning(
                f"Q_CLUSTER 'orm' is {orm!r}, not the database the engine writes ('default'): "
                "bells are not in the same transaction as the state change.",
                hint="Set Q_CLUSTER['orm'] = 'default'.",
                id="workerflow.W007",
            )
        )
    database = django_settings.DATABASES.get("default", {})
    errors += check_sqlite_database(database)
    errors += check_connection_reuse(database)
    return errors


def check_connection_reuse(database: dict[str, Any]) -> list[Warning]:
    """W009: django-q2 closes old connections around every task; with ``CONN_MAX_AGE = 0``
    each bell opens a new PostgreSQL connection (measured: ~31 ms a task instead of ~4 ms)."""
    if "postgresql" not in database.get("ENGINE", "") or database.get("CONN_MAX_AGE", 0):
        return []
    return [
        Warning(
            "DATABASES['default'] has CONN_MAX_AGE = 0: every bell a worker handles opens a "
            "new PostgreSQL connection, which limits a cluster to about 30 ticks a second "
            "and makes timers late under load.",
            hint="Set CONN_MAX_AGE = 60 and CONN_HEALTH_CHECKS = True (at least for the "
            "settings the qcluster runs with).",
            id="workerflow.W009",
        )
    ]


def check_sqlite_database(database: dict[str, Any]) -> list[Warning]:
    """W008 for a SQLite ``DATABASES`` entry that concurrent writers would lock up."""
    if "sqlite3" not in database.get("ENGINE", ""):
        return []
    options = database.get("OPTIONS", {})
    problems = []
    if str(options.get("transaction_mode", "")).upper() != "IMMEDIATE":
        problems.append("'transaction_mode': 'IMMEDIATE'")
    if "journal_mode=wal" not in str(options.get("init_command", "")).lower().replace(" ", ""):
        problems.append("'init_command': 'PRAGMA journal_mode=WAL;'")
    if not options.get("timeout"):
        problems.append("'timeout': 20")
    if not problems:
        return []
    return [
        Warning(
            "The SQLite database is not set up for a web process and workers writing at the "
            "same time: expect 'database is locked' errors.",
            hint="Add to DATABASES['default']['OPTIONS']: " + ", ".join(problems) + ".",
            id="workerflow.W008",
        )
    ]
