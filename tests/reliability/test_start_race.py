"""Racing start() calls on one key: one instance, one input, one version, one 'created'."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

import django_workerflow as workerflow
from django_workerflow import WorkflowInputError, WorkflowVersionConflictError
from django_workerflow.models import WorkflowEvent, WorkflowInstance

from .conftest import in_threads, print_figures, requires_postgres, table_counts

pytestmark = [pytest.mark.reliability, pytest.mark.postgres_only, requires_postgres]

THREADS = 8
ROUNDS = 40


def race(key: str, start_one) -> list:
    """Start ``key`` from THREADS threads released together; return what each got back
    (an instance pk, or the exception it raised)."""
    barrier = threading.Barrier(THREADS)

    def attempt(number: int):
        barrier.wait(30)
        try:
            return start_one(number).pk
        except (WorkflowInputError, WorkflowVersionConflictError) as exc:
            return exc

    return in_threads(*[lambda n=n: attempt(n) for n in range(THREADS)], timeout=30)


def test_start__racing_calls_on_one_key_create_exactly_one_instance(transactional_db, define):
    definition = define(lambda self: self.input)
    before = table_counts()
    pinned_inputs = Counter()

    for round_number in range(ROUNDS):
        key = f"start-race-{round_number}"
        pks = race(
            key, lambda n, key=key: workerflow.start(definition, key=key, input={"thread": n})
        )

        instance = WorkflowInstance.objects.get(key=key)
        assert pks == [instance.pk] * THREADS
        # The first start pinned its input; every caller got that one instance back.
        assert set(instance.input) == {"thread"}
        pinned_inputs[instance.input["thread"]] += 1
        types = WorkflowEvent.objects.filter(instance=instance).values_list("type", flat=True)
        assert list(types) == ["created"]

    after = table_counts()
    assert after["WorkflowInstance"] - before["WorkflowInstance"] == ROUNDS
    assert after["WorkflowEvent"] - before["WorkflowEvent"] == ROUNDS
    print_figures(
        "start race",
        rounds=ROUNDS,
        threads_per_round=THREADS,
        start_calls=ROUNDS * THREADS,
        instances_created=ROUNDS,
        distinct_winning_threads=len(pinned_inputs),
    )


def test_start__racing_calls_with_two_versions_pin_one_and_refuse_the_other(
    transactional_db, define
):
    old = define(lambda self: "old", name="versioned-race", version="1")
    new = define(lambda self: "new", name="versioned-race", version="2")
    refusals = 0

    for round_number in range(ROUNDS // 2):
        key = f"version-race-{round_number}"
        outcomes = race(
            key,
            lambda n, key=key: workerflow.start(old if n % 2 else new, key=key),
        )

        instance = WorkflowInstance.objects.get(key=key)
        pinned = instance.definition_version
        for number, outcome in enumerate(outcomes):
            wanted = (old if number % 2 else new).version
            if wanted == pinned:
                assert outcome == instance.pk
            else:
                assert isinstance(outcome, WorkflowVersionConflictError), outcome
                assert f"'{pinned}'" in str(outcome)
                assert f"'{wanted}'" in str(outcome)
                refusals += 1
        assert WorkflowEvent.objects.filter(instance=instance).count() == 1

    assert refusals == (ROUNDS // 2) * (THREADS // 2)
    print_figures("start race, two versions", rounds=ROUNDS // 2, version_conflicts=refusals)


def test_start__racing_calls_with_two_definitions_keep_the_key_with_one(transactional_db, define):
    first = define(lambda self: 1, name="race-first")
    second = define(lambda self: 2, name="race-second")

    for round_number in range(ROUNDS // 4):
        key = f"name-race-{round_number}"
        outcomes = race(
            key,
            lambda n, key=key: workerflow.start(first if n % 2 else second, key=key),
        )

        instance = WorkflowInstance.objects.get(key=key)
        winners = [o for o in outcomes if not isinstance(o, Exception)]
        losers = [o for o in outcomes if isinstance(o, Exception)]
        assert winners == [instance.pk] * (THREADS // 2)
        assert len(losers) == THREADS // 2
        for exc in losers:
            assert isinstance(exc, WorkflowInputError)
            assert key in str(exc)
            assert instance.definition_name in str(exc)
