"""pause_definition() racing running ticks on PostgreSQL threads: once it returns, no step
of the definition starts, each step that ran is recorded once, and resuming finishes them all.

Each thread has its own connection (``transactional_db``). The figure printed is how many
steps started after pause_definition() returned, per round: the guarantee is that a step
start that *begins* after it returned is refused; one already executing in the database when
the pause committed may still land (docs/concepts.md, its limits).
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter

import pytest
from django.db import connection

import django_workerflow as workerflow
from django_workerflow.models import Step, WorkflowInstance, WorkflowStatus
from django_workerflow.runtime.tick import tick
from django_workerflow.values.states import TickEnding
from tests.support.threads import in_threads

pytestmark = [
    pytest.mark.postgres_only,
    pytest.mark.skipif(
        connection.vendor != "postgresql",
        reason="needs PostgreSQL (WORKERFLOW_DB=postgres): SQLite serialises all writers",
    ),
]

STEPS = 40
INSTANCES = 3
ROUNDS = 8
rng = random.Random(20261205)


def counting_steps(calls: Counter, started: threading.Event):
    def execute(self):
        def step(number: int) -> int:
            calls[(self.key, number)] += 1
            started.set()
            time.sleep(0.001)
            return number

        return [self.run(f"s{n}", lambda n=n: step(n)) for n in range(STEPS)]

    return execute


def test_pause_definition__racing_ticks__no_step_starts_once_it_returned(
    transactional_db, define, workerflow_harness
):
    late_starts: list[int] = []
    for round_number in range(ROUNDS):
        calls: Counter = Counter()
        started = threading.Event()
        definition = define(counting_steps(calls, started))
        instances = [
            workerflow.start(definition, key=f"r{round_number}-{n}") for n in range(INSTANCES)
        ]

        def ticker(pk: int) -> TickEnding:
            return tick(pk).outcome

        def pauser(name: str = definition.name, started: threading.Event = started) -> int:
            assert started.wait(60)
            time.sleep(rng.uniform(0, 0.01))
            assert workerflow.pause_definition(name, reason="race") is True
            return Step.objects.filter(instance__definition_name=name).count()

        *outcomes, steps_at_pause = in_threads(
            *[lambda pk=i.pk: ticker(pk) for i in instances], pauser
        )

        steps_after = Step.objects.filter(instance__definition_name=definition.name).count()
        late_starts.append(steps_after - steps_at_pause)
        # At most the one start per tick that was already executing when the pause committed.
        assert steps_after - steps_at_pause <= INSTANCES
        for instance, outcome in zip(instances, outcomes, strict=True):
            instance.refresh_from_db()
            if outcome == TickEnding.COMPLETED:
                continue
            assert outcome == TickEnding.HELD
            assert (instance.status, instance.lease_token) == (WorkflowStatus.RUNNING, None)
            # A tick now finds it held and starts nothing.
            assert tick(instance.pk).outcome == TickEnding.HELD
        assert Step.objects.filter(instance__definition_name=definition.name).count() == (
            steps_after
        )
        assert workerflow_harness.drain() == 0  # held: not due for the harness either

        workerflow.resume_definition(definition.name)
        workerflow_harness.drain()

        for instance in instances:
            instance.refresh_from_db()
            assert instance.status == WorkflowStatus.COMPLETED
            assert instance.result == list(range(STEPS))
            assert all(calls[(instance.key, n)] == 1 for n in range(STEPS))
        assert not WorkflowInstance.objects.filter(
            definition_name=definition.name, lease_token__isnull=False
        ).exists()
    print(f"\nsteps started after pause_definition() returned, per round: {late_starts}")
