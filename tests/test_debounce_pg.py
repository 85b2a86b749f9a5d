"""Debounce under a race on PostgreSQL: debounced starts against workers claiming the first
tick. Either the tick runs the last input a start replaced, or the start finds the instance
started and changes nothing; never both, never a lost input."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

import django_workerflow as workerflow
from django_workerflow.models import WorkflowEvent, WorkflowInstance, WorkflowStatus
from django_workerflow.runtime import verbs
from tests.threads import in_threads

from . import flow_helpers

pytestmark = [
    pytest.mark.postgres_only,
    pytest.mark.skipif(
        connection.vendor != "postgresql",
        reason="needs PostgreSQL (WORKERFLOW_DB=postgres): SQLite serialises all writers",
    ),
]
define_with = flow_helpers.define_with

ROUNDS = 20


def test_debounced_starts_racing_ticks__the_run_sees_the_last_replaced_input(
    transactional_db, define_with
):
    ran: list[tuple[str, object]] = []
    ran_lock = threading.Lock()

    def execute(self):
        def record():
            with ran_lock:
                ran.append((self.key, self.input))
            return self.input

        return self.run("record", record)

    definition = define_with(execute)
    figures = []
    for round_ in range(ROUNDS):
        key = f"race-{round_}"
        done = threading.Event()
        replaced: list[int] = []
        after_start: list[int] = []

        def starter() -> None:
            for index in range(10_000):
                instance = workerflow.start(
                    definition, key=key, input=index, debounce=0.03, max_debounce=0.25
                )
                if instance.status == WorkflowStatus.PENDING and instance.input == index:
                    replaced.append(index)
                else:
                    after_start.append(index)
                    if len(after_start) >= 3:
                        break
            done.set()

        def worker() -> int:
            ticks = 0
            while not done.is_set():
                pk = WorkflowInstance.objects.filter(key=key).values_list("pk", flat=True).first()
                if pk is not None:
                    verbs.tick(pk)
                    ticks += 1
            return ticks

        started = time.monotonic()
        results = in_threads(starter, worker, worker, timeout=60)
        elapsed = time.monotonic() - started
        instance = WorkflowInstance.objects.get(key=key)
        runs = [value for ran_key, value in ran if ran_key == key]
        debounced = WorkflowEvent.objects.filter(instance=instance, type="debounced").count()
        figures.append((len(replaced), len(after_start), sum(results[1:]), elapsed))
        assert instance.status == WorkflowStatus.COMPLETED
        # The run saw the last input a start replaced; no later start changed it.
        assert runs == [replaced[-1]]
        assert instance.input == replaced[-1]
        assert debounced == len(replaced) - 1  # the first start created the instance
        assert after_start  # the race reached its end: starts that found it started
    print()
    for round_, (replacing, late, ticks, elapsed) in enumerate(figures):
        print(
            f"round {round_:2}: debounced starts {replacing:4}, starts after the first step "
            f"{late}, ticks tried {ticks:5}, {elapsed:.3f} s"
        )
