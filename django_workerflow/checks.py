"""System checks (``manage.py check``) for settings that break the engine or slow it down.

Every warning has an id and a hint that links to the row of the documentation's table of
checks that explains it (``docs/operations.md#workerflow-w006``); the same explanations
follow here. Silence one you have weighed with ``SILENCED_SYSTEM_CHECKS =
["workerflow.W006"]``.

workerflow.W001
    ``django_q`` is not in ``INSTALLED_APPS``, so no worker will ever run a workflow (the
    other checks are skipped). Add ``"django_q"`` and run ``manage.py qcluster``.
workerflow.W002
    ``Q_CLUSTER`` has no ``timeout``: a step callback that hangs holds its worker forever.
    Set ``timeout`` (e.g. 60) and ``retry`` above it (e.g. 90).
workerflow.W003
    ``retry`` (default 60) is not above ``timeout``: django-q2 hands a task that is still
    running to a second worker after ``retry`` seconds. Set ``retry`` to ``timeout`` plus
    the longest queue wait, e.g. 60 and 90.
workerflow.W004
    ``max_attempts`` is 0 (the default, unlimited): a task that keeps failing is redelivered
    forever. Set it to 3-5; the engine needs no more, because an instance's alarm lives in
    the database and the sweeper rings it again.
workerflow.W005
    ``WORKERFLOW_TICK_BUDGET`` is not below ``timeout``: a long workflow's tick is killed
    before it yields. Keep the budget at a third of ``timeout`` or less.
workerflow.W006
    ``Q_CLUSTER`` has no ``orm``, so the broker is not django-q2's ORM broker, the only one
    that can delay a task: sleeps, retries and wait timeouts fire only when the sweeper
    finds them overdue (15 s to 2 min late), and so does a bell lost with a crashed worker.
    Measured with the Redis broker: a 5 s sleep woke 22 s late, 0.25 s retry backoffs took
    30 s and cron occurrences were 15 to 47 s late (the ORM broker: 0.04 s).
    Set ``Q_CLUSTER["orm"] = "default"`` for timers precise to a tenth of a second: a bell
    is then a row inserted in the same transaction as the state change, due at its time.
    Silence the check if sweeper precision is enough.
workerflow.W007
    ``orm`` names another database than ``default``: bells are not in the same
    transaction as the state change, so a rollback can leave a bell or lose one. Set
    ``orm`` to ``"default"``.
workerflow.W008
    The default database is SQLite without ``"transaction_mode": "IMMEDIATE"``, WAL in
    ``init_command`` or a ``timeout``: with a web process and workers writing at once,
    expect "database is locked" errors. Add the options the hint lists.
workerflow.W009
    The default database has ``CONN_MAX_AGE = 0``: django-q2 closes old connections around
    every task, so each bell opens a new connection. On PostgreSQL (measured: ~31 ms a task
    instead of ~4 ms) that is about 30 ticks a second per cluster at most; on SQLite each
    reopen costs about 1.4 ms (the file, its pragmas, Django's SQL functions), more than a
    short workflow's whole tick. Set ``CONN_MAX_AGE = 60`` (and on PostgreSQL
    ``CONN_HEALTH_CHECKS = True``), at least for the settings the qcluster runs with.
workerflow.W010
    ``Q_CLUSTER`` is missing altogether: django-q2 then runs with its own defaults, which
    break the engine in several ways at once (no timeout, unlimited redelivery, no ORM
    broker). This one warning replaces W002-W007. Add the ``Q_CLUSTER`` the README shows.
workerflow.W011
    A definition is registered from a module that workers do not import: registered after
    this process set its apps up (not by a ``workflows`` module, an app's ``ready()``, or
    what they import) from a module no ``workflows`` module imports. A definition imported
    by a view alone is registered in the web process and missing in the worker, and its
    instances wait forever. Move it into (or import it from) a ``workflows`` module. A
    ``django.tasks`` task's definition never warns: workers define it on demand.
workerflow.W012
    A definition's ``step_timeout`` is not below ``Q_CLUSTER["timeout"]``: django-q2 kills the
    worker before the step's own limit fires, so a slow attempt costs a worker and is counted
    as interrupted (``WorkerLostError`` after three) instead of failing with
    ``StepTimeoutError`` and being retried. Lower ``step_timeout`` below ``timeout`` minus
    ``WORKERFLOW_TICK_BUDGET``, or raise ``timeout``. Only the definitions' defaults are
    checked: a ``timeout`` given to ``run()`` is known when the step runs.
workerflow.E001
    ``Q_CLUSTER`` selects a django-q2 broker whose package is not installed, most often the
    Redis broker django-q2 falls back to when ``Q_CLUSTER`` names no other (no ``orm``): every
    bell and ``qcluster`` itself would fail with ``ModuleNotFoundError``. Set ``orm`` (the
    recommended ``Q_CLUSTER``), or install the package the error names.
workerflow.E002
    ``WORKERFLOW_PAYLOAD_CODEC`` is set but its codec cannot be built (not importable, the
    ``cryptography`` package missing, keys that are not Fernet keys): every start of a
    definition with sensitive fields would fail. Fix the setting or the keys, or unset it.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from django import conf as django_conf
from django.apps import apps
from django.core.checks import Error, Tags, Warning, register

from django_workerflow import registry
from django_workerflow.conf import settings
from django_workerflow.definition.drift import DEFINITIONS_HINT, unimported_definitions
from django_workerflow.definition.options import as_timedelta
from django_workerflow.exceptions import WorkflowStateError
from django_workerflow.values import sealing

# Every hint ends with the address of the documentation row that explains its check.
DOCS_URL = "https://github.com/django-workerflow/django-workerflow/blob/main/docs/operations.md"


def see(check_id: str) -> str:
    """ " See <docs>#workerflow-w006.": the end of ``check_id``'s hint."""
    return f" See {DOCS_URL}#{check_id.replace('.', '-').lower()}."


def _q_cluster() -> dict[str, Any]:
    return getattr(django_conf.settings, "Q_CLUSTER", {}) or {}


@register(Tags.compatibility)
def check_worker_settings(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    if not apps.is_installed("django_q"):
        return [
            Warning(
                "django_q is not in INSTALLED_APPS, so no worker will ever run a workflow.",
                hint="Add 'django_q' to INSTALLED_APPS and run `manage.py qcluster`."
                + see("workerflow.W001"),
                id="workerflow.W001",
            )
        ]
    if not hasattr(django_conf.settings, "Q_CLUSTER"):
        return [
            Warning(
                "Q_CLUSTER is not set: django-q2's defaults have no timeout, redeliver a "
                "failing task forever and use no ORM broker, so timers fire late.",
                hint="Add Q_CLUSTER = {'name': 'workerflow', 'orm': 'default', 'timeout': 60, "
                "'retry': 90, 'max_attempts': 3} to your settings." + see("workerflow.W010"),
                id="workerflow.W010",
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
                hint="Set Q_CLUSTER['timeout'] (e.g. 60) and 'retry' above it (e.g. 90)."
                + see("workerflow.W002"),
                id="workerflow.W002",
            )
        )
    elif retry <= timeout:
        errors.append(
            Warning(
                f"Q_CLUSTER 'retry' ({retry}) is not above 'timeout' ({timeout}): django-q2 "
                "hands a task that is still running to a second worker after 'retry' seconds.",
                hint="Set Q_CLUSTER['retry'] to 'timeout' plus the longest queue wait, e.g. "
                "timeout 60 and retry 90." + see("workerflow.W003"),
                id="workerflow.W003",
            )
        )
    if conf.get("max_attempts", 0) == 0:
        errors.append(
            Warning(
                "Q_CLUSTER 'max_attempts' is 0 (unlimited): a task that keeps failing is "
                "redelivered forever.",
                hint="Set Q_CLUSTER['max_attempts'] to 3-5; the sweeper re-rings lost bells."
                + see("workerflow.W004"),
                id="workerflow.W004",
            )
        )
    if timeout is not None and timeout <= settings.TICK_BUDGET:
        errors.append(
            Warning(
                f"WORKERFLOW_TICK_BUDGET ({settings.TICK_BUDGET} s) is not below Q_CLUSTER "
                f"'timeout' ({timeout} s): a long workflow's tick is killed before it yields.",
                hint="Keep WORKERFLOW_TICK_BUDGET at a third of the timeout or less."
                + see("workerflow.W005"),
                id="workerflow.W005",
            )
        )
    orm = conf.get("orm")
    if orm is None:
        errors.append(
            Warning(
                "Q_CLUSTER does not use the ORM broker, which alone can delay a task: sleeps, "
                "retries and wait timeouts fire only when the sweeper finds them overdue "
                "(15 s to 2 min late; measured with Redis: a 5 s sleep woke 22 s late, 0.25 s "
                "retry backoffs took 30 s, cron occurrences were 15 to 47 s late, against "
                "0.04 s with the ORM broker), and a bell lost with a crashed worker waits for "
                "the sweeper too.",
                hint="Set Q_CLUSTER['orm'] = 'default' for timers precise to a tenth of a "
                "second. Silence this check if the delay is fine." + see("workerflow.W006"),
                id="workerflow.W006",
            )
        )
    elif orm != "default":
        errors.append(
            Warning(
                f"Q_CLUSTER 'orm' is {orm!r}, not the database the engine writes ('default'): "
                "bells are not in the same transaction as the state change.",
                hint="Set Q_CLUSTER['orm'] = 'default'." + see("workerflow.W007"),
                id="workerflow.W007",
            )
        )
    database = django_conf.settings.DATABASES.get("default", {})
    errors += check_sqlite_database(database)
    errors += check_connection_reuse(database)
    return errors


def check_connection_reuse(database: dict[str, Any]) -> list[Warning]:
    """W009: django-q2 closes old connections around every task; with ``CONN_MAX_AGE = 0``
    each bell opens a new connection (PostgreSQL: ~31 ms a task instead of ~4 ms; SQLite:
    ~1.4 ms a reopen)."""
    engine = database.get("ENGINE", "")
    if database.get("CONN_MAX_AGE", 0):
        return []
    if "postgresql" in engine:
        problem = (
            "opens a new PostgreSQL connection, which limits a cluster to about 30 ticks a "
            "second and makes timers late under load"
        )
        fix = "Set CONN_MAX_AGE = 60 and CONN_HEALTH_CHECKS = True"
    elif "sqlite3" in engine:
        problem = (
            "reopens the SQLite database (about 1.4 ms each time, more than a short "
            "workflow's tick costs)"
        )
        fix = "Set CONN_MAX_AGE = 60"
    else:
        return []
    return [
        Warning(
            f"DATABASES['default'] has CONN_MAX_AGE = 0: every bell a worker handles {problem}.",
            hint=f"{fix} (at least for the settings the qcluster runs with)."
            + see("workerflow.W009"),
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
            hint="Add to DATABASES['default']['OPTIONS']: "
            + ", ".join(problems)
            + "."
            + see("workerflow.W008"),
            id="workerflow.W008",
        )
    ]


@register(Tags.compatibility)
def check_definition_modules(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    """W011: definitions registered from a module that workers do not import.

    The URLconf is imported first, as the web process (and Django's URL check) imports it:
    the definitions its views declare are then registered whatever order the checks run in.
    """
    _import_urlconf()
    return [
        Warning(
            f"Workflow definition {definition.name!r} version {definition.version!r} is "
            f"registered from {definition.__module__}, which workers do not import: its "
            "instances would wait forever for a worker that has it.",
            hint=f"Move {definition.__qualname__} into a `workflows` module, or import it "
            f"from one: {DEFINITIONS_HINT}." + see("workerflow.W011"),
            obj=definition,
            id="workerflow.W011",
        )
        for definition in unimported_definitions()
    ]


@register(Tags.compatibility)
def check_step_timeouts(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    """W012: a definition's ``step_timeout`` that django-q2's process timeout pre-empts."""
    timeout = _q_cluster().get("timeout")
    if not isinstance(timeout, int | float) or timeout <= 0:
        return []  # no process timeout (W002) or one django-q2 itself rejects
    return [
        Warning(
            f"Workflow definition {definition.name!r} version {definition.version!r} has "
            f"step_timeout {seconds:g} s, not below Q_CLUSTER 'timeout' ({timeout} s): the "
            "worker is killed before a slow step's own timeout fires.",
            hint=f"Set step_timeout below {timeout} s minus WORKERFLOW_TICK_BUDGET, or raise "
            "Q_CLUSTER['timeout']." + see("workerflow.W012"),
            obj=definition,
            id="workerflow.W012",
        )
        for definition in registry.definitions()
        if definition.step_timeout is not None
        and (seconds := as_timedelta(definition.step_timeout).total_seconds()) >= timeout
    ]


# django-q2's brokers in the order it picks them (django_q.brokers.get_broker), each with the
# module it imports and the package that provides it; without any of these keys, Redis.
_BROKERS: tuple[tuple[str, str, str | None, str | None], ...] = (
    ("iron_mq", "IronMQ", "iron_mq", "iron-mq"),
    ("sqs", "SQS", "boto3", "boto3"),
    ("orm", "ORM", None, None),
    ("mongo", "MongoDB", "pymongo", "pymongo"),
)


@register(Tags.compatibility)
def check_broker_package(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """E001: the broker ``Q_CLUSTER`` selects cannot be imported (``qcluster`` runs the
    system checks before it starts, so this is printed instead of its crash)."""
    if not apps.is_installed("django_q"):
        return []
    conf = _q_cluster()
    if conf.get("broker_class"):
        module = str(conf["broker_class"]).rpartition(".")[0]
        if _importable(module):
            return []
        problem = f"Q_CLUSTER['broker_class'] names a module that cannot be imported ({module})"
        fix = "Correct Q_CLUSTER['broker_class'] or install the package that provides it."
    else:
        key, broker, needed, package = next(
            (entry for entry in _BROKERS if conf.get(entry[0])),
            ("", "Redis", "redis", "redis"),
        )
        if needed is None or _importable(needed):
            return []
        chosen = f"sets '{key}'" if key else "names no other broker (no 'orm')"
        problem = (
            f"Q_CLUSTER selects django-q2's {broker} broker (it {chosen}), but the "
            f"{needed!r} package is not installed"
        )
        fix = (
            "Set Q_CLUSTER['orm'] = 'default' and 'broker_class': "
            "'django_workerflow.broker.DueFirstOrmBroker' (the recommended Q_CLUSTER), or "
            f"`pip install {package}`."
        )
    return [
        Error(
            f"{problem}: `manage.py qcluster` and every bell would fail with ModuleNotFoundError.",
            hint=fix + see("workerflow.E001"),
            id="workerflow.E001",
        )
    ]


@register(Tags.security)
def check_payload_codec(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """E002: ``WORKERFLOW_PAYLOAD_CODEC`` is set but its codec cannot be built (not
    importable, the ``cryptography`` package missing, keys that are not keys): every start
    of a definition with sensitive fields would fail."""
    try:
        sealing.codec()
    except WorkflowStateError as exc:
        return [
            Error(
                f"The payload codec cannot be built: {exc}",
                hint="Fix WORKERFLOW_PAYLOAD_CODEC or WORKERFLOW_FERNET_KEYS, or unset the "
                "codec." + see("workerflow.E002"),
                id="workerflow.E002",
            )
        ]
    return []


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that is missing, or an empty name
        return False


def _import_urlconf() -> None:
    """Import the project's URLconf and the views it names, as serving a request would."""
    if not getattr(django_conf.settings, "ROOT_URLCONF", None):
        return
    from django.urls import get_resolver  # pydoc reads this module without Django's settings

    try:
        get_resolver().url_patterns  # noqa: B018 (reading it imports the URLconf)
    except Exception:  # a broken URLconf is for Django's URL checks to report
        return
