"""Settings for the django-workerflow test project.

Environment variables:

- ``WORKERFLOW_DEBUG``: ``1`` (default) or ``0``.
- ``WORKERFLOW_DB``: ``sqlite`` (default) or ``postgres``.
- ``WORKERFLOW_SQLITE_PATH``: SQLite database file (default ``<repo>/db.sqlite3``).
- ``WORKERFLOW_SQLITE_TEST_PATH``: SQLite file for the test database (default: a file per
  process in the temp folder, so qcluster subprocesses can open it).
- ``WORKERFLOW_PG_NAME``: PostgreSQL database name (default ``workerflow``).
- ``WORKERFLOW_PG_PORT``: PostgreSQL port on 127.0.0.1 (default 5432; a private server lets
  the database restart test run without disturbing others).
- ``WORKERFLOW_DEMO``: ``1`` (set by ``make demo``) adds ``testproject.demoapp``, the demo's
  tour: a workflow that fails, a concurrency limit and a schedule that fires every minute.
- ``WORKERFLOW_LEASE_SECONDS``: overrides the engine's lease length (crash-recovery tests).
- ``WORKERFLOW_TICK_BUDGET``: overrides how long a tick may execute before it yields (tests
  that stop a cluster while it works).
- ``WORKERFLOW_Q_LOG_LEVEL``: django-q2's ``log_level`` (default INFO); ``DEBUG`` also logs
  its lines about the engine's own tasks (tests that read which bells a cluster ran).
- ``WORKERFLOW_Q_NAME``: django-q2's cluster ``name``, its queue (a test of workers named
  apart from the web process).

The test suite runs ``tests/settings.py``, which adds its own apps to these.

The workflow engine itself reads flat ``WORKERFLOW_*`` Django settings, each with a
default, so none are needed here.
"""

import importlib.util
import os
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = "django-insecure-workerflow-testproject-dev-key-not-for-production"

DEBUG = os.environ.get("WORKERFLOW_DEBUG", "1").lower() in {"1", "true", "yes", "on"}

ALLOWED_HOSTS = ["localhost", "127.0.0.1", "[::1]", "testserver"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_q",
    "django_workerflow",
    "testproject.shop",
]

# `make demo` adds its tour (a failing workflow, a queue, a schedule firing every minute).
if os.environ.get("WORKERFLOW_DEMO"):
    INSTALLED_APPS.append("testproject.demoapp")

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "testproject.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = "testproject.wsgi.application"

# --- Database --------------------------------------------------------------------------

WORKERFLOW_DB = os.environ.get("WORKERFLOW_DB", "sqlite").strip().lower()
DATABASES: dict[str, dict[str, Any]]

if WORKERFLOW_DB == "sqlite":
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ.get("WORKERFLOW_SQLITE_PATH", str(BASE_DIR / "db.sqlite3")),
            "OPTIONS": {
                # Take the write lock at BEGIN so concurrent writers (web + qcluster
                # workers) wait on `timeout` instead of failing with "database is locked".
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
            # Workers keep their connection: django-q2 closes old ones around every task,
            # and reopening SQLite costs about 1.4 ms a bell (check workerflow.W009).
            "CONN_MAX_AGE": 60,
            # A file, not memory: tests that run real qcluster processes or threads must
            # reach the same database. One per process, so parallel runs do not collide.
            "TEST": {
                "NAME": os.environ.get("WORKERFLOW_SQLITE_TEST_PATH")
                or os.path.join(tempfile.gettempdir(), f"workerflow-test-{os.getpid()}.sqlite3")
            },
        }
    }
elif WORKERFLOW_DB == "postgres":
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": os.environ.get("WORKERFLOW_PG_NAME", "workerflow"),
            "USER": "postgres",
            "HOST": "127.0.0.1",
            "PORT": int(os.environ.get("WORKERFLOW_PG_PORT", "5432")),
            # Workers reuse connections: django-q2 closes old ones around every task, and a
            # new PostgreSQL connection per bell costs ~30 ms (check workerflow.W009).
            "CONN_MAX_AGE": 60,
            "CONN_HEALTH_CHECKS": True,
        }
    }
else:
    raise ValueError(f"WORKERFLOW_DB must be 'sqlite' or 'postgres', not {WORKERFLOW_DB!r}")

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Internationalization --------------------------------------------------------------

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# --- Static files ----------------------------------------------------------------------

STATIC_URL = "static/"

# --- django-q2 -------------------------------------------------------------------------

Q_CLUSTER = {
    "name": "workerflow",
    "orm": "default",
    "workers": 2,
    "timeout": 60,
    "retry": 90,
    "max_attempts": 3,
    "poll": 0.05,
    "catch_up": False,
    "ack_failures": True,
    # As the README recommends: due bells first; on PostgreSQL woken by NOTIFY.
    "broker_class": "django_workerflow.broker.DueFirstOrmBroker",
}
if "WORKERFLOW_Q_LOG_LEVEL" in os.environ:
    Q_CLUSTER["log_level"] = os.environ["WORKERFLOW_Q_LOG_LEVEL"]
if "WORKERFLOW_Q_NAME" in os.environ:
    Q_CLUSTER["name"] = os.environ["WORKERFLOW_Q_NAME"]

# --- django-workerflow -----------------------------------------------------------------

if "WORKERFLOW_LEASE_SECONDS" in os.environ:
    WORKERFLOW_LEASE_SECONDS = float(os.environ["WORKERFLOW_LEASE_SECONDS"])
if "WORKERFLOW_TICK_BUDGET" in os.environ:
    WORKERFLOW_TICK_BUDGET = float(os.environ["WORKERFLOW_TICK_BUDGET"])
if "WORKERFLOW_SWEEP_SECONDS" in os.environ:
    WORKERFLOW_SWEEP_SECONDS = float(os.environ["WORKERFLOW_SWEEP_SECONDS"])
if "WORKERFLOW_SWEEP_IDLE_SECONDS" in os.environ:
    WORKERFLOW_SWEEP_IDLE_SECONDS = float(os.environ["WORKERFLOW_SWEEP_IDLE_SECONDS"])

# --- Django's tasks framework ---------------------------------------------------------

# Tasks run on the engine (docs/tasks.md). Django 5.2 needs the django-tasks backport
# (the `tasks` extra); without it the project runs without TASKS.
if importlib.util.find_spec("django.tasks") or importlib.util.find_spec("django_tasks"):
    TASKS = {
        "default": {
            "BACKEND": "django_workerflow.task_backend.WorkflowTaskBackend",
            "QUEUES": ["default", "serial", "retries", "rated"],
            "OPTIONS": {
                "queues": {
                    # One task at a time, whatever its function: priorities order the rest.
                    "serial": {"max_concurrency": 1},
                    "retries": {"max_attempts": 3},
                    "rated": {"rate_limit": (2, timedelta(seconds=1))},
                },
            },
        }
    }

# --- Logging ---------------------------------------------------------------------------

LOGGING: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "simple": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "simple"},
    },
    "loggers": {
        "django_workerflow": {"handlers": ["console"], "level": "INFO", "propagate": False},
    },
}
if os.environ.get("WORKERFLOW_DEMO"):
    # The tour fails an invoice on purpose: say what was raised in one line, not a traceback.
    LOGGING["formatters"]["simple"]["()"] = "testproject.demoapp.logs.OneLineExceptions"

# Django 6.1 configures email senders in MAILERS (older versions ignore it).
MAILERS = {"default": {"BACKEND": "django.core.mail.backends.console.EmailBackend"}}
