"""resume_definition() moving timeout deadlines while other transactions lock the same
instance rows, on PostgreSQL threads: a cancel cascading from a parent to its children (rows
in primary-key order, as the resume takes them) and events sent to the children. No
deadlock, no error, and every instance still unfinished has its deadline moved exactly once,
by the pause's length."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.db import connection

import django_workerflow as workerflow
from django_workerflow.models import WorkflowInstance, WorkflowStatus
from tests.support.threads import in_threads

pytestmark = [
    pytest.mark.postgres_only,
    pytest.mark.skipif(
        connection.vendor != "postgresql",
        reason="needs PostgreSQL (WORKERFLOW_DB=postgres): SQLite serialises all writers",
    ),
]

CHILDREN = 4
ROUNDS = 6
PAUSE = timedelta(seconds=100)
rng = random.Random(20261206)


def family(self):
    """A parent (input "parent") waits for its children, which wait for the event 'go'."""
    if self.input == "parent":
        return self.all(
            *[
                (lambda n=n: self.child(f"c{n}", type(self), key=f"{self.key}/c{n}", input=n))
                for n in range(CHILDREN)
            ]
        )
    return self.wait("go", "go")


def test_resume_definition__racing_cancels_and_events__moves_each_deadline_once(
    transactional_db, define_with, workerflow_harness
):
    definition = define_with(family, timeout=3600)
    for round_number in range(ROUNDS):
        parent = workerflow.start(definition, key=f"r{round_number}", input="parent")
        workerflow_harness.drain()
        rows = WorkflowInstance.objects.filter(key__startswith=f"r{round_number}")
        before = dict(rows.values_list("pk", "deadline_at"))
        assert len(before) == CHILDREN + 1
        assert None not in before.values()

        workerflow.pause_definition(definition.name, reason="race")
        workerflow_harness.clock.advance(PAUSE)
        children = [f"r{round_number}/c{n}" for n in range(CHILDREN)]
        rng.shuffle(children)
        racers = [
            lambda: workerflow.resume_definition(definition.name),
            *[lambda key=key: workerflow.send_event(key, "go") for key in children[:2]],
        ]
        if round_number % 2:
            racers.append(lambda key=parent.key: workerflow.cancel(key, reason="race"))
        rng.shuffle(racers)
        in_threads(*racers)

        for pk, status, deadline in rows.values_list("pk", "status", "deadline_at"):
            if status in (WorkflowStatus.PENDING, WorkflowStatus.RUNNING):
                assert deadline - before[pk] == PAUSE, (round_number, pk)
        workerflow_harness.drain()
