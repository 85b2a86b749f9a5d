"""start()'s ids on PostgreSQL come from a block the process draws ahead (issue 15): one
statement per start in the steady state, ids unique across threads, a forked child never
reusing its parent's ids, a taken id costing a retry, not an error."""

from __future__ import annotations

import itertools
import os
import threading
from contextlib import nullcontext
from typing import Any

import pytest
from django.db import connection, transaction

import django_workerflow as workerflow
from django_workerflow.models import WorkflowEvent, WorkflowInstance
from django_workerflow.store import instance_ids
from django_workerflow.workers import bell_rows


def _postgresql_with_bells() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the id block serves PostgreSQL's one-statement start")
    if not bell_rows.direct_orm_bells():
        pytest.skip("ids are drawn ahead only for a start that writes its own bell")


def _bells() -> list[int]:
    from django_q.models import OrmQ
    from django_q.signing import SignedPackage

    payloads = OrmQ.objects.values_list("payload", flat=True)
    return sorted(SignedPackage.loads(payload)["args"][0] for payload in payloads)


# The block itself, on either database (a stand-in cursor plays the sequence) ------------


class FakeSequence:
    """A cursor whose ``SELECT nextval(...) FROM generate_series(1, n)`` hands out the next
    ``n`` values of one counter; counts its draws."""

    def __init__(self) -> None:
        self._counter = itertools.count(1)
        self._lock = threading.Lock()
        self._rows: list[tuple[int]] = []
        self.draws = 0

    def execute(self, sql: str, params: list[Any]) -> None:
        assert "nextval" in sql
        with self._lock:
            self.draws += 1
            self._rows = [(next(self._counter),) for _ in range(params[1])]

    def fetchall(self) -> list[tuple[int]]:
        return self._rows


def test_id_block__hands_out_each_drawn_id_once_in_increasing_order():
    block, sequence = instance_ids.IdBlock(4), FakeSequence()

    ids = [block.take(sequence) for _ in range(10)]

    assert ids == list(range(1, 11))
    assert sequence.draws == 3  # 4 + 4 + 2 of the third block
    assert len(block) == 2


def test_id_block__ids_are_unique_across_threads():
    block, sequence = instance_ids.IdBlock(5), FakeSequence()
    taken: list[list[int]] = [[] for _ in range(8)]
    barrier = threading.Barrier(len(taken))

    def take_many(into: list[int]) -> None:
        barrier.wait()
        into.extend(block.take(sequence) for _ in range(200))

    threads = [threading.Thread(target=take_many, args=(into,)) for into in taken]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    every = [pk for ids in taken for pk in ids]
    assert len(every) == len(set(every)) == 1600
    assert all(ids == sorted(ids) for ids in taken)  # within a thread, still increasing
    assert sequence.draws == 1600 // 5  # no block drawn and thrown away


def test_id_block__a_block_drawn_by_another_process_is_not_used(monkeypatch):
    block, sequence = instance_ids.IdBlock(10), FakeSequence()
    assert block.take(sequence) == 1

    # As in a child forked without Python's at-fork hooks: another pid, the same memory.
    monkeypatch.setattr(instance_ids.os, "getpid", lambda: -1)

    assert len(block) == 0
    assert block.take(sequence) == 11
    assert sequence.draws == 2


def test_id_block__discard_makes_the_next_take_draw_again():
    block, sequence = instance_ids.IdBlock(10), FakeSequence()
    block.take(sequence)

    block.discard()

    assert block.take(sequence) == 11


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork")
def test_id_block__a_forked_child_draws_its_own_block():
    block, sequence = instance_ids.IdBlock(10), FakeSequence()
    os.register_at_fork(after_in_child=block._reset)  # noqa: SLF001 - the hook instance_ids registers
    assert block.take(sequence) == 1
    read, write = os.pipe()

    pid = os.fork()
    if pid == 0:  # the child: report the id it takes and its block's size before that
        try:
            os.write(write, f"{len(block)} {block.take(sequence)}".encode())
        finally:
            os._exit(0)
    os.close(write)
    reported = os.read(read, 100).decode()
    os.waitpid(pid, 0)
    os.close(read)

    assert reported == "0 11"  # the parent's 2-10 were dropped in the child
    assert block.take(sequence) == 2  # and stay the parent's


# One statement per start, on PostgreSQL -------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_start__sends_one_statement_while_the_block_lasts(define, monkeypatch):
    _postgresql_with_bells()
    monkeypatch.setattr(instance_ids.id_block, "size", 4)
    instance_ids.id_block.discard()
    workflow = define(lambda self: None)
    per_start: list[list[str]] = []

    def record(execute, sql, params, many, context):
        per_start[-1].append(sql.split()[0].upper())
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        for number in range(9):
            per_start.append([])
            workerflow.start(workflow, key=f"k{number}", input=number)

    # The start statement (prepared: labelled by a comment) after the refill's draw.
    refill, steady = ["SELECT", "/*"], ["/*"]
    # No BEGIN or COMMIT either: each statement is its own transaction.
    assert per_start == [refill, steady, steady, steady] * 2 + [refill]
    instances = list(WorkflowInstance.objects.order_by("key"))
    assert [i.input for i in instances] == list(range(9))
    assert _bells() == sorted(i.pk for i in instances)
    assert WorkflowEvent.objects.filter(type="created").count() == 9


@pytest.mark.django_db(transaction=True)
def test_start__ids_from_threads_are_unique_and_each_bell_names_its_own(define, monkeypatch):
    _postgresql_with_bells()
    monkeypatch.setattr(instance_ids.id_block, "size", 7)
    workflow = define(lambda self: None)
    returned: list[list[int]] = [[] for _ in range(4)]
    errors: list[BaseException] = []

    def start_many_alone(index: int) -> None:
        try:
            for number in range(25):
                instance = workerflow.start(workflow, key=f"t{index}-{number}")
                returned[index].append(instance.pk)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=start_many_alone, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert errors == []
    pks = sorted(pk for ids in returned for pk in ids)
    assert len(set(pks)) == 100
    assert sorted(WorkflowInstance.objects.values_list("pk", flat=True)) == pks
    assert _bells() == pks


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork")
def test_start__in_a_forked_child_takes_no_id_of_the_parents_block(define):
    _postgresql_with_bells()
    workflow = define(lambda self: None)
    instance_ids.id_block.discard()
    first = workerflow.start(workflow, key="parent-1")
    parents_block = range(first.pk, first.pk + instance_ids.id_block.size)
    read, write = os.pipe()

    pid = os.fork()
    if pid == 0:
        try:
            # The parent's connection stays the parent's: neither used nor closed here (and
            # os._exit runs no finalizer that would close it).
            parents_connection, connection.connection = connection.connection, None
            child = workerflow.start(workflow, key="child")
            os.write(write, str(child.pk).encode())
            del parents_connection
        finally:
            os._exit(0)
    os.close(write)
    child_pk = int(os.read(read, 100).decode() or 0)
    os.waitpid(pid, 0)
    os.close(read)
    second = workerflow.start(workflow, key="parent-2")

    assert child_pk
    assert child_pk not in parents_block
    assert second.pk == first.pk + 1
    assert WorkflowInstance.objects.get(key="child").pk == child_pk
    assert _bells() == sorted([first.pk, second.pk, child_pk])


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("in_transaction", [False, True])
def test_start__an_id_already_taken_costs_a_retry_not_an_error(define, in_transaction):
    """As after ``TRUNCATE ... RESTART IDENTITY``: the block's next id is in the table."""
    _postgresql_with_bells()
    workflow = define(lambda self: None)
    instance_ids.id_block.discard()
    first = workerflow.start(workflow, key="draws-a-block")
    squatter = WorkflowInstance.objects.create(
        pk=instance_ids.id_block._ids[-1],  # noqa: SLF001 - the next id the block hands out
        key="squatter",
        definition_name=workflow.name,
        definition_version=workflow.version,
        created_at=first.created_at,
        updated_at=first.created_at,
    )

    with transaction.atomic() if in_transaction else nullcontext():
        started = workerflow.start(workflow, key="fresh", input={"n": 1})
        again = workerflow.start(workflow, key="fresh", input={"n": 2})

    assert squatter.pk == first.pk + 1
    assert started.pk >= first.pk + instance_ids.id_block.size  # from a block drawn afresh
    assert (again.pk, again.input) == (started.pk, {"n": 1})
    stored = WorkflowInstance.objects.get(key="fresh")
    assert (stored.pk, stored.input) == (started.pk, {"n": 1})
    assert _bells() == [first.pk, started.pk]
    assert WorkflowEvent.objects.filter(instance_id=started.pk, type="created").count() == 1


@pytest.mark.django_db(transaction=True)
def test_start__of_a_taken_key_writes_nothing_and_burns_one_id(define):
    _postgresql_with_bells()
    workflow = define(lambda self: None)
    instance_ids.id_block.discard()
    first = workerflow.start(workflow, key="same", input=1)

    again = workerflow.start(workflow, key="same", input=2)
    other = workerflow.start(workflow, key="other")

    assert (again.pk, again.input) == (first.pk, 1)
    assert other.pk == first.pk + 2  # the same block: one id lost to the conflict
    assert _bells() == [first.pk, other.pk]
    assert WorkflowEvent.objects.filter(type="created").count() == 2


# The returned instance is the stored one, on either database ----------------------------


@pytest.mark.django_db
def test_start__returns_the_instance_as_stored(
    define, status_changes, django_capture_on_commit_callbacks
):
    workflow = define(lambda self: None)

    with django_capture_on_commit_callbacks(execute=True):
        instance = workerflow.start(workflow, key="as-stored", input={"a": [1, "b"]}, priority=3)
        many = workerflow.start_many(workflow, [("m1", 1), ("m2", None)])

    for returned in [instance, *many]:
        stored = WorkflowInstance.objects.get(pk=returned.pk)
        for field in WorkflowInstance._meta.concrete_fields:
            assert getattr(returned, field.attname) == getattr(stored, field.attname), field.name
        assert not returned._state.adding
        assert returned._state.db == "default"
    assert [c for c in status_changes.changes if c[1] == "pending"] == [
        ("as-stored", "pending", None),
        ("m1", "pending", None),
        ("m2", "pending", None),
    ]
