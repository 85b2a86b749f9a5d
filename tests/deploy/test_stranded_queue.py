"""Issue 43 item 1: a web process and workers with different ``Q_CLUSTER["name"]`` made loud.
The web process's bells wait in a queue no cluster serves (the sweeper rang them late from
the workers' queue, and nothing looked wrong): `health` fails naming that queue and the fix,
and the admin overview says the same."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse
from django.utils import timezone
from django_q.conf import Conf
from django_q.models import OrmQ

import django_workerflow as workerflow
from django_workerflow.deploy import health
from django_workerflow.models import WorkerHeartbeat

pytestmark = pytest.mark.django_db
WORKERS = "workerflow"


def probe() -> tuple[str, int]:
    out = StringIO()
    try:
        call_command("workerflow", "health", stdout=out)
    except CommandError as exc:
        return str(exc), exc.returncode
    return out.getvalue(), 0


@pytest.fixture
def web_named_otherwise(define, monkeypatch):
    """The workers of queue 'workerflow' report; a web process named 'shop-web' starts two
    instances, whose bells go to its own queue."""
    WorkerHeartbeat.objects.create(queue=WORKERS, beat_at=timezone.now() - timedelta(seconds=3))
    definition = define(lambda self: self.run("work", lambda: 1))
    monkeypatch.setattr(Conf, "CLUSTER_NAME", "shop-web")
    for key in ("a", "b"):
        workerflow.start(definition, key=key)
    monkeypatch.setattr(Conf, "CLUSTER_NAME", WORKERS)
    assert set(OrmQ.objects.values_list("key", flat=True)) == {"shop-web"}


def test_health__fails_naming_the_queue_no_cluster_serves_and_the_fix(web_named_otherwise):
    output, code = probe()

    assert code == 1
    assert output == (
        "UNHEALTHY: 2 tasks (bells) wait in queue 'shop-web', which no cluster serves (the "
        "clusters serve 'workerflow'); give the web process and the workers the same "
        "Q_CLUSTER['name'], or run a cluster for 'shop-web'."
    )


def test_health__a_queue_its_cluster_serves_is_not_stranded(define):
    WorkerHeartbeat.objects.create(queue=WORKERS, beat_at=timezone.now())
    workerflow.start(define(lambda self: None), key="served")

    assert OrmQ.objects.filter(key=WORKERS).exists()
    assert health.stranded_queues(timezone.now()) == []
    assert probe()[1] == 0


def test_health__no_cluster_at_all_is_not_reported_as_stranded_queues(define):
    workerflow.start(define(lambda self: None), key="nobody")

    assert probe()[0] == (
        "UNHEALTHY: no cluster has ever reported. The workers are down, overloaded or "
        "wedged: restart the cluster."
    )


def test_overview__says_which_queue_is_stranded_and_the_fix(web_named_otherwise, admin_client):
    page = admin_client.get(reverse("admin:workerflow_overview")).content.decode()

    assert "Stranded queue shop-web:" in page
    assert "give the web process and the workers the same Q_CLUSTER[&#x27;name&#x27;]" in page
