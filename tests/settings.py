"""Settings of the test suite: the demo project's, plus what the tests need.

pytest reads this module (``DJANGO_SETTINGS_MODULE`` in pyproject.toml), and so do the real
``qcluster`` processes the tests start (tests/cluster/conftest.py passes it on), so that a
worker imports the same apps as the test that enqueued its work. The demo's settings know
nothing of the tests.

Environment variables are the demo's: see ``testproject/settings.py``.
"""

import os

from testproject.settings import *  # noqa: F403 - the tests run the demo project
from testproject.settings import INSTALLED_APPS, Q_CLUSTER

# The workflows that real qcluster processes started by tests/cluster run.
INSTALLED_APPS = [*INSTALLED_APPS, "tests.clusterapp", "tests.readyapp"]

# A test's clusters may run fewer (or more) workers: one, to see that a task left it alive.
if "WORKERFLOW_TEST_WORKERS" in os.environ:
    Q_CLUSTER = {**Q_CLUSTER, "workers": int(os.environ["WORKERFLOW_TEST_WORKERS"])}

# A test's clusters may kill a task's worker sooner (django-q2's process timeout, seconds).
if "WORKERFLOW_TEST_Q_TIMEOUT" in os.environ:
    Q_CLUSTER = {**Q_CLUSTER, "timeout": int(os.environ["WORKERFLOW_TEST_Q_TIMEOUT"])}

# A test's clusters may start without TASKS, as a worker started before TASKS named the
# backend (tests/cluster/test_tasks_restart_cluster.py).
if os.environ.get("WORKERFLOW_TEST_NO_TASKS"):
    globals().pop("TASKS", None)

# Logins the tests create hash their passwords with a fast hasher, as Django's testing docs
# advise: PBKDF2's million iterations cost about 0.3 s of CPU a user.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
