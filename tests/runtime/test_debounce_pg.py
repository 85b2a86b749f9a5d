"""Debounce under a race on PostgreSQL: debounced starts against workers claiming the first
tick. Either the tick runs the last input a start replaced, or the start finds the instance
started and changes nothing; never both, never a lost input."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import pytest
from django.db import connection

import django_workerflow as workerflow
from django_workerflow import WorkflowDefinition
from django_workerflow.models import WorkflowEvent, WorkflowInstance, WorkflowStatus
from django_workerflow.runtime.tick import tick
from tests.support.threads import in_threads

pytestmark = [
    pytest.mark.postgres_only,
    pytest.mark.skipif(
        connection.vendor != "postgresql",
        reason="needs PostgreSQL (WORKERFLOW_DB=postgres): SQLite serialises all writers",
    ),
]

ROUNDS = 20
RAN: list[tuple[str, object]] = []
RAN_LOCK = threading.Lock()


def record_input(self: WorkflowDefinition) -> object:
    def record() -> object:
        with RAN_LOCK:
            RAN.append((self.key, self.input))
        return self.input

    return self.run("record", record)


@dataclass
class Round:
    """One race: a starter's debounced starts against two workers ticking the instance."""

    definition: type[WorkflowDefinition]
    key: str
    done: threading.Event = field(default_factory=threading.Event)
    replaced: list[int] = field(default_factory=list)
    after_start: list[int] = field(default_factory=list)

    def starter(self) -> None:
        """Start with a new input every time until three starts found the instance started."""
        for index in range(10_000):
            instance = workerflow.start(
                self.definition, key=self.key, input=index, debounce=0.03, max_debounce=0.25
            )
            if instance.status == WorkflowStatus.PENDING and instance.input == index:
                self.replaced.append(index)
            else:
                self.after_start.append(index)
                if len(self.after_start) >= 3:
                    break
        self.done.set()

    def worker(self) -> int:
        """Tick the instance as fast as possible (a tick not due does nothing)."""
        ticks = 0
        while not self.done.is_set():
            pk = WorkflowInstance.objects.filter(key=self.key).values_list("pk", flat=True).first()
            if pk is not None:
                tick(pk)
                ticks += 1
        return ticks


def test_debounced_starts_racing_ticks__the_run_sees_the_last_replaced_input(
    transactional_db, define_with
):
    RAN.clear()
    definition = define_with(record_input)
    figures = []
    for number in range(ROUNDS):
        race = Round(definition, f"race-{number}")
        began = time.monotonic()
        results = in_threads(race.starter, race.worker, race.worker, timeout=60)
        elapsed = time.monotonic() - began
        instance = WorkflowInstance.objects.get(key=race.key)
        runs = [value for key, value in RAN if key == race.key]
        debounced = WorkflowEvent.objects.filter(instance=instance, type="debounced").count()
        figures.append((len(race.replaced), len(race.after_start), sum(results[1:]), elapsed))
        assert instance.status == WorkflowStatus.COMPLETED
        # The run saw the last input a start replaced; no later start changed it.
        assert runs == [race.replaced[-1]]
        assert instance.input == race.replaced[-1]
        assert debounced == len(race.replaced) - 1  # the first start created the instance
    print()
    for number, (replacing, late, ticks, elapsed) in enumerate(figures):
        print(
            f"round {number:2}: debounced starts {replacing:4}, starts after the first step "
            f"{late}, ticks tried {ticks:5}, {elapsed:.3f} s"
        )
