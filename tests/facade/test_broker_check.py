"""workerflow.E001: a Q_CLUSTER whose broker package is missing (django-q2 falls back to Redis)
is a system check error, which `qcluster` prints instead of crashing on `import redis`."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import override_settings

from django_workerflow import checks
from django_workerflow.checks import check_broker_package

ROOT = Path(__file__).resolve().parents[2]
MINIMAL = {"name": "minimal", "timeout": 60, "retry": 90, "max_attempts": 3}
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("redis") is not None, reason="the redis package is installed here"
)


def errors(q_cluster: dict) -> list:
    with override_settings(Q_CLUSTER=q_cluster):
        return check_broker_package()


def test_e001__names_the_missing_redis_package_and_what_to_set():
    [error] = errors(MINIMAL)

    assert error.id == "workerflow.E001"
    assert "django-q2's Redis broker" in error.msg
    assert "'redis' package is not installed" in error.msg
    assert "Q_CLUSTER['orm'] = 'default'" in error.hint
    assert "`pip install redis`" in error.hint
    assert error.hint.endswith(f" See {checks.DOCS_URL}#workerflow-e001.")
    operations = (ROOT / "docs" / "operations.md").read_text()
    assert '<a id="workerflow-e001"></a>`workerflow.E001`' in operations
    assert "\nworkerflow.E001\n" in checks.__doc__


@pytest.mark.parametrize(
    "q_cluster",
    [
        {**MINIMAL, "orm": "default"},
        {**MINIMAL, "broker_class": "django_workerflow.broker.DueFirstOrmBroker"},
    ],
)
def test_e001__not_raised_for_a_broker_that_imports(q_cluster):
    assert errors(q_cluster) == []


def test_e001__a_broker_class_that_cannot_be_imported():
    [error] = errors({**MINIMAL, "broker_class": "no_such_package.brokers.Broker"})

    assert "(no_such_package.brokers)" in error.msg


def test_e001__sqs_without_boto3():
    if importlib.util.find_spec("boto3") is not None:
        pytest.skip("boto3 is installed here")
    [error] = errors({**MINIMAL, "sqs": {"aws_region": "eu-west-1"}})

    assert "SQS broker (it sets 'sqs')" in error.msg
    assert "`pip install boto3`" in error.hint


@pytest.mark.slow
def test_qcluster__prints_e001_and_stops_before_the_redis_crash(tmp_path):
    (tmp_path / "minimal_settings.py").write_text(
        f"from testproject.settings import *  # noqa: F403\nQ_CLUSTER = {MINIMAL!r}\n"
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "minimal_settings",
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
        "WORKERFLOW_SQLITE_PATH": str(tmp_path / "db.sqlite3"),
    }
    env.pop("WORKERFLOW_DB", None)
    done = subprocess.run(
        [sys.executable, "manage.py", "qcluster", "--run-once"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode != 0
    assert "workerflow.E001" in done.stderr
    assert "No module named 'redis'" not in done.stderr + done.stdout
    assert "Traceback" not in done.stderr
