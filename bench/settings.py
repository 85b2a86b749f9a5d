"""Settings of the benchmark: the test project's, tuned for measuring, with its workflows.

- ``DEBUG = False``: Django's debug cursor wrapper records every query and costs about 30 %
  of a step.
- PostgreSQL keeps the test project's ``CONN_MAX_AGE = 60`` (django-q2 closes "old"
  connections around every task; without reuse each bell opens a new connection).
- ``Q_CLUSTER["workers"]`` is the README's recommendation: 4, or 2 on SQLite (one writer at
  a time).
"""

import importlib.util
import os

from testproject.settings import *  # noqa: F403 - the benchmark runs the test project
from testproject.settings import INSTALLED_APPS, Q_CLUSTER, WORKERFLOW_DB

DEBUG = False

INSTALLED_APPS = [*INSTALLED_APPS, "bench.benchapp"]

# The tasks scenario measures django-tasks-db's database backend beside ours, when it is
# installed (the `bench` extra): its own alias, its own table, its own worker.
if importlib.util.find_spec("django_tasks_db") and "TASKS" in globals():
    INSTALLED_APPS.append("django_tasks_db")
    TASKS = {
        **TASKS,  # noqa: F405 - TASKS comes from the test project's settings
        "database": {"BACKEND": "django_tasks_db.DatabaseBackend"},
    }

Q_CLUSTER = {
    **Q_CLUSTER,
    "workers": 2 if WORKERFLOW_DB == "sqlite" else 4,
    # Bells under a backlog go out earliest-due first.
    "broker_class": "django_workerflow.broker.DueFirstOrmBroker",
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"simple": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "simple"}},
    # start() logs every instance it creates: the benchmark would print thousands of lines.
    "loggers": {
        "django_workerflow": {"handlers": ["console"], "level": "WARNING", "propagate": False}
    },
}

# A scenario may run its cluster with another number of workers (bench.bell_claim: one).
if "WORKERFLOW_BENCH_WORKERS" in os.environ:
    Q_CLUSTER["workers"] = int(os.environ["WORKERFLOW_BENCH_WORKERS"])
