"""start_many(): validated before any write, idempotent by key, 1,000 rows per statement,
bells included (issue 15)."""

from __future__ import annotations

import pytest
from django.db import connection

import django_workerflow as workerflow
from django_workerflow.exceptions import WorkflowInputError, WorkflowVersionConflictError
from django_workerflow.models import WorkflowEvent, WorkflowInstance, WorkflowStatus
from django_workerflow.runtime import starting
from django_workerflow.workers import bells

pytestmark = pytest.mark.django_db


@pytest.fixture
def workflow(define):
    return define(lambda self: self.input)


def test_start_many__creates_one_pending_instance_per_item_in_order(workflow, workerflow_harness):
    instances = workerflow.start_many(workflow, [("a", {"n": 1}), ("b", None), (None, [2])])

    assert [i.key for i in instances[:2]] == ["a", "b"]
    assert [i.input for i in instances] == [{"n": 1}, None, [2]]
    assert all(i.status == WorkflowStatus.PENDING for i in instances)
    stored = WorkflowInstance.objects.get(key="a")
    assert (stored.pk, stored.input, stored.definition_version) == (
        instances[0].pk,
        {"n": 1},
        workflow.version,
    )
    assert WorkflowEvent.objects.filter(type="created").count() == 3
    workerflow_harness.drain()
    assert WorkflowInstance.objects.get(key="a").result == {"n": 1}


def test_start_many__is_idempotent_by_key(workflow):
    first = workerflow.start(workflow, key="taken", input=1)

    instances = workerflow.start_many(workflow, [("taken", 2), ("new", 3), ("new", 4)])

    assert instances[0].pk == first.pk
    assert instances[0].input == 1
    assert instances[1].pk == instances[2].pk
    assert instances[2].input == 3
    assert WorkflowInstance.objects.count() == 2
    assert WorkflowEvent.objects.filter(type="created").count() == 2


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (("k", {1, 2}), "Item 2 of start_many()"),
        (("bad\x00key", 1), "Item 2 of start_many()"),
        ("not a pair", "Item 2 of start_many()"),
        (("k", "x", "y"), "Item 2 of start_many()"),
    ],
)
def test_start_many__a_bad_item_refuses_the_whole_call_before_any_write(workflow, bad, message):
    items = [("ok-1", 1), ("ok-2", 2), bad, ("ok-3", 3)]

    with pytest.raises(WorkflowInputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        workerflow.start_many(workflow, items)

    assert WorkflowInstance.objects.count() == 0


def test_start_many__an_existing_key_of_another_version_refuses_before_any_write(define):
    old = define(lambda self: 1, version="1")
    workerflow.start(old, key="pinned")
    define(lambda self: 2, version="2", name=old.name)

    with pytest.raises(WorkflowVersionConflictError, match="Item 1 of start_many"):
        workerflow.start_many(old.name, [("fresh", 1), ("pinned", 2)], version="2")

    assert list(WorkflowInstance.objects.values_list("key", flat=True)) == ["pinned"]


def test_start_many__writes_at_most_1000_rows_per_statement(workflow, monkeypatch):
    batches, statements = [], []
    insert_pending = starting.insert_pending

    def recording(name, version, entries, now, **options):
        batches.append(len(entries))
        return insert_pending(name, version, entries, now, **options)

    def record(execute, sql, params, many, context):
        if f"INSERT INTO {WorkflowInstance._meta.db_table} " in sql:
            statements.append(sql)
        return execute(sql, params, many, context)

    monkeypatch.setattr(starting, "insert_pending", recording)
    with connection.execute_wrapper(record):
        instances = workerflow.start_many(workflow, ((f"k{n}", n) for n in range(2500)))

    assert len(instances) == WorkflowInstance.objects.count() == 2500
    # Each batch of at most 1,000 rows is written by one statement.
    assert batches == [1000, 1000, 500]
    assert len(statements) == 3


def test_start_many__rings_a_bell_per_new_instance(workflow):
    if not bells.uses_delayed_bells():
        pytest.skip("bells are rows only with django-q2's ORM broker")
    from django_q.models import OrmQ
    from django_q.signing import SignedPackage

    instances = workerflow.start_many(workflow, [(f"k{n}", n) for n in range(5)])

    queued = [SignedPackage.loads(p) for p in OrmQ.objects.values_list("payload", flat=True)]
    assert sorted(task["args"][0] for task in queued) == sorted(i.pk for i in instances)
    assert all(task["func"] == bells.TICK_TASK for task in queued)
    assert {i.bell_at for i in WorkflowInstance.objects.all()} == {instances[0].alarm_at}


@pytest.fixture
def limited(define):
    """One slot per region: its concurrency key is the input's 'region'."""

    def concurrency_key(self):
        return self.input["region"]

    definition = define(lambda self: self.input)
    definition.max_concurrency = 1
    definition.concurrency_key = concurrency_key
    return definition


@pytest.mark.parametrize(
    ("region", "error"),
    [(5, "must return a string"), ("eu\x00", "NUL character"), ("x" * 256, "at most 255")],
)
def test_start_many__under_a_concurrency_limit__a_bad_concurrency_key_refuses_before_any_write(
    limited, region, error
):
    items = [("ok-1", {"region": "eu"}), ("ok-2", {"region": "us"}), ("bad", {"region": region})]

    with pytest.raises(WorkflowInputError, match=r"Item 2 of start_many\(\) is refused") as caught:
        workerflow.start_many(limited, items)

    assert error in str(caught.value)
    assert WorkflowInstance.objects.count() == 0


def test_start_many__under_a_concurrency_limit__queues_beyond_the_slots(limited):
    items = [("a", {"region": "eu"}), ("b", {"region": "eu"}), ("c", {"region": "us"})]

    instances = workerflow.start_many(limited, [*items, ("a", {"region": "us"})])

    assert [i.key for i in instances] == ["a", "b", "c", "a"]
    assert instances[0].pk == instances[3].pk
    assert [i.admitted_at is not None for i in instances[:3]] == [True, False, True]
    assert WorkflowInstance.objects.count() == 3
