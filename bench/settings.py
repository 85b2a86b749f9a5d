"""Settings of the benchmark: the test project's, with the benchmark's workflows installed.

``WORKERFLOW_BENCH_CONN_MAX_AGE`` (seconds, default 0 as in Django) sets ``CONN_MAX_AGE``:
django-q2 closes "old" connections before every dequeue, task and acknowledgement, so with
Django's default each of them opens a new database connection.
"""

import os

from testproject.settings import *  # noqa: F403 - the benchmark runs the test project
from testproject.settings import DATABASES, INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "bench.benchapp"]

DATABASES["default"]["CONN_MAX_AGE"] = float(os.environ.get("WORKERFLOW_BENCH_CONN_MAX_AGE", 0))
if DATABASES["default"]["CONN_MAX_AGE"]:
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
