"""Bells under a backlog are handed out earliest-due first (issue 15)."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

pytestmark = pytest.mark.django_db

pytest.importorskip("django_q")


def inversions(values: list) -> int:
    return sum(
        1 for i in range(len(values)) for j in range(i + 1, len(values)) if values[i] > values[j]
    )


def test_due_first_broker__hands_out_a_backlog_earliest_due_first():
    from django_q.conf import Conf
    from django_q.models import OrmQ

    from django_workerflow.broker import DueFirstOrmBroker

    now = timezone.now()
    dues = [now - timedelta(seconds=n) for n in range(1, 201)]
    random.Random(15).shuffle(dues)
    OrmQ.objects.bulk_create(
        OrmQ(key=Conf.CLUSTER_NAME, payload=f"due-{due.isoformat()}", lock=due) for due in dues
    )
    OrmQ.objects.create(key=Conf.CLUSTER_NAME, payload="later", lock=now + timedelta(hours=1))
    broker = DueFirstOrmBroker(list_key=Conf.CLUSTER_NAME)

    handed_out = []
    while len(handed_out) < len(dues):
        handed_out += [payload for _pk, payload in broker.dequeue()]

    assert len(handed_out) == 200
    assert "later" not in handed_out
    assert inversions(handed_out) == 0
    assert handed_out == [f"due-{due.isoformat()}" for due in sorted(dues)]


def test_bell_queue__has_the_key_lock_index():
    from django_q.models import OrmQ

    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, OrmQ._meta.db_table)
    assert constraints["workerflow_ormq_key_lock"]["columns"] == ["key", "lock"]


def test_due_first_broker__hands_out_a_backlog_by_priority_then_earliest_due():
    """Tasks of 5 priorities enqueued in a shuffled order (all due): their bells come out
    highest ``Task.priority`` first, each priority's in enqueue order."""
    from django_q.conf import Conf

    from django_workerflow.broker import DueFirstOrmBroker
    from tests.clusterapp import tasks

    priorities = [-20, -10, 0, 10, 20] * 20
    random.Random(37).shuffle(priorities)
    keys = {}
    for priority in priorities:  # no harness: each start queues its bell
        keys[tasks.nothing.using(priority=priority).enqueue().id] = priority
    broker = DueFirstOrmBroker(list_key=Conf.CLUSTER_NAME)

    handed_out = []
    while len(handed_out) < len(priorities):
        handed_out += [_instance_key(payload) for _pk, payload in broker.dequeue()]

    order = [-keys[key] for key in handed_out]  # the engine's priority: lower first
    assert inversions(order) == 0
    enqueued = list(keys)
    assert handed_out == sorted(handed_out, key=lambda key: (-keys[key], enqueued.index(key)))


def test_due_first_broker__hands_out_a_sweep_bell_ahead_of_a_backlog_of_urgent_tasks():
    """The sweeper recovers stuck work: a backlog of the highest-priority tasks, due before
    it, does not hold back its bell (a bell for no instance is housekeeping)."""
    from django_q.conf import Conf
    from django_q.signing import SignedPackage

    from django_workerflow.broker import DueFirstOrmBroker
    from django_workerflow.workers import bells
    from tests.clusterapp import tasks

    for _ in range(5):
        tasks.nothing.using(priority=100).enqueue()
    bells.queue_task(
        "django_workerflow.tasks.sweep_and_beat", "x", when=timezone.now(), name="sweep"
    )
    broker = DueFirstOrmBroker(list_key=Conf.CLUSTER_NAME)

    (_pk, first), *_rest = broker.dequeue()

    assert SignedPackage.loads(first)["func"] == "django_workerflow.tasks.sweep_and_beat"


def test_bell_queue__has_the_key_priority_lock_index():
    from django_q.models import OrmQ

    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, OrmQ._meta.db_table)
    assert constraints["workerflow_ormq_key_priority_lock"]["columns"] == [
        "key",
        "workerflow_priority",
        "lock",
    ]


def _instance_key(payload: str) -> str:
    from django_q.signing import SignedPackage

    from django_workerflow.models import WorkflowInstance

    (pk,) = SignedPackage.loads(payload)["args"]
    return WorkflowInstance.objects.get(pk=pk).key
