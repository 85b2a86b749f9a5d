"""Searchable attributes: set_attributes(), start(attributes=...), and the key lookup that
finds them (filter(attributes__customer="c-42")) on both databases."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.models.fields.json import JSONField

import django_workerflow as workerflow
from django_workerflow import WorkflowInputError, WorkflowStateError
from django_workerflow.definition.workflow import WorkflowDefinition
from django_workerflow.exceptions import WorkflowDefinitionError
from django_workerflow.models import WorkflowInstance
from django_workerflow.models.attributes import AttributeKey
from django_workerflow.values import attributes as values
from tests.support.statements import count_tick

pytestmark = pytest.mark.django_db


def _attributes(key: str):
    return WorkflowInstance.objects.get(key=key).attributes


@pytest.fixture
def order_flow(define):
    """Sets the customer from its input, then the state after a step, then waits."""

    def execute(self):
        self.set_attributes(customer=self.input["customer"], region="eu")
        self.run("charge", lambda: None)
        self.set_attributes(state="charged", region=None)
        self.wait("ship", "shipped")
        return "ok"

    return define(execute, name="test-order")


# Setting them --------------------------------------------------------------------------


def test_set_attributes__are_stored_last_write_wins_and_none_removes(order_flow, harness):
    workerflow.start(order_flow, key="o1", input={"customer": "c-42"})
    harness.drain()
    assert _attributes("o1") == {"customer": "c-42", "state": "charged"}


def test_start__stores_the_given_attributes_before_the_first_tick(define):
    instance = workerflow.start(
        define(lambda self: None), key="s1", attributes={"customer": "c-7", "vip": True}
    )
    assert instance.attributes == {"customer": "c-7", "vip": True}
    assert _attributes("s1") == {"customer": "c-7", "vip": True}


def test_start__without_attributes_leaves_the_column_null(define):
    workerflow.start(define(lambda self: None), key="none")
    assert _attributes("none") is None


def test_start__a_workflow_adds_to_the_attributes_a_start_gave(order_flow, harness):
    workerflow.start(order_flow, key="o2", input={"customer": "c-1"}, attributes={"channel": "web"})
    harness.drain()
    assert _attributes("o2") == {"channel": "web", "customer": "c-1", "state": "charged"}


def test_start__an_existing_instance_keeps_its_attributes(define):
    definition = define(lambda self: None)
    workerflow.start(definition, key="same", attributes={"a": 1})
    again = workerflow.start(definition, key="same", attributes={"a": 2})
    assert again.attributes == {"a": 1}


def test_start__with_flow_control_stores_them_too(define):
    definition = define(lambda self: None)
    definition.max_concurrency = 1
    try:
        instance = workerflow.start(definition, key="q1", attributes={"customer": "c-3"})
    finally:
        definition.max_concurrency = None
    assert _attributes(instance.key) == {"customer": "c-3"}


def test_start_many__gives_every_new_instance_the_attributes(define):
    created = workerflow.start_many(
        define(lambda self: None), [("m1", 1), ("m2", 2)], attributes={"batch": 7}
    )
    assert [i.attributes for i in created] == [{"batch": 7}, {"batch": 7}]
    assert list(
        WorkflowInstance.objects.filter(attributes__batch=7).values_list("key", flat=True)
    ) == ["m2", "m1"]


async def _astart(definition):
    return await workerflow.astart(definition, key="as1", attributes={"customer": "c-9"})


def test_astart__takes_attributes(define):
    from asgiref.sync import async_to_sync

    instance = async_to_sync(_astart)(define(lambda self: None))
    assert instance.attributes == {"customer": "c-9"}


def test_fork__keeps_the_sources_attributes(order_flow, harness):
    instance = workerflow.start(order_flow, key="o3", input={"customer": "c-5"})
    harness.drain()
    fork = instance.fork(key="o3-fork")
    assert _attributes(fork.key) == {"customer": "c-5", "state": "charged"}


def test_set_attributes__outside_an_execution_is_a_state_error():
    class Lonely(WorkflowDefinition, register=False):
        name = "test-lonely"

        def execute(self):
            return None

    with pytest.raises(WorkflowStateError):
        Lonely(key="x", input=None).set_attributes(customer="c")


# Refusals: a clear error, nothing stored ------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"customer": {"id": 1}}, "is a dict"),
        ({"tags": ["a"]}, "is a list"),
        ({"note": "x" * (values.MAX_TEXT_LENGTH + 1)}, "more than the limit of 200"),
        ({"big": 2**53 + 1}, "beyond the limit"),
        ({"ratio": float("nan")}, "finite number"),
        ({"zero": "\x00"}, "NUL"),
        ({"in": 1}, "is reserved"),
        ({"_private": 1}, "is reserved"),
    ],
)
def test_set_attributes__refuses_a_bad_value_with_what_to_do_and_keeps_the_stored_ones(
    define, harness, changes, words
):
    def execute(self):
        self.set_attributes(customer="c-1")
        try:
            self.set_attributes(**changes)
        except WorkflowInputError as exc:
            return str(exc)
        return "accepted"

    instance = workerflow.start(define(execute), key="bad")
    harness.drain()
    instance.refresh_from_db()
    assert words in instance.result
    assert instance.attributes == {"customer": "c-1"}


@pytest.mark.parametrize(
    ("attributes", "words"),
    [
        ({"order-id": "1"}, "is not an identifier"),
        ({"1st": "1"}, "is not an identifier"),
        ({"x" * 65: 1}, "the limit is 64"),
        ({"customer": object()}, "is a object"),
        ("customer=c-1", "takes a dict"),
        ({f"a{n}": n for n in range(values.MAX_ATTRIBUTES + 1)}, "at most 20 attributes"),
    ],
)
def test_start__refuses_bad_attributes_and_creates_nothing(define, attributes, words):
    with pytest.raises(WorkflowInputError, match=words):
        workerflow.start(define(lambda self: None), key="refused", attributes=attributes)
    assert not WorkflowInstance.objects.filter(key="refused").exists()


def test_start_many__refuses_bad_attributes_and_creates_nothing(define):
    with pytest.raises(WorkflowInputError, match="is a list"):
        workerflow.start_many(define(lambda self: None), [("r1", 1)], attributes={"x": [1]})
    assert not WorkflowInstance.objects.exists()


# Replays and statements ------------------------------------------------------------------


def test_set_attributes__a_replay_that_sets_the_same_values_writes_nothing(order_flow, harness):
    instance = workerflow.start(order_flow, key="o4", input={"customer": "c-2"})
    harness.drain()
    WorkflowInstance.objects.filter(pk=instance.pk).update(alarm_at=harness.now())
    counter = count_tick(instance.pk)
    assert not [s for s in counter.statements if "SET attributes" in s]
    assert _attributes("o4") == {"customer": "c-2", "state": "charged"}


def test_set_attributes__true_and_1_are_different_values(define, harness):
    def execute(self):
        self.set_attributes(flag=True)
        self.run("one", lambda: None)
        self.set_attributes(flag=1)

    workerflow.start(define(execute), key="typed")
    harness.drain()
    stored = _attributes("typed")
    assert stored == {"flag": 1}
    assert not isinstance(stored["flag"], bool)


def test_set_attributes__costs_one_statement_and_no_transaction_more(define):
    def plain(self):
        for number in range(3):
            self.run(f"s{number}", lambda: None)
        self.sleep("rest", 60)

    def tagged(self):
        self.set_attributes(customer="c-1")
        for number in range(3):
            self.run(f"s{number}", lambda: None)
        self.sleep("rest", 60)

    plain, tagged = define(plain), define(tagged)
    for definition in (plain, tagged):  # PostgreSQL prepares each statement once
        count_tick(workerflow.start(definition).pk)
    first = count_tick(workerflow.start(plain).pk)
    second = count_tick(workerflow.start(tagged).pk)
    assert len(second.statements) == len(first.statements) + 1
    assert second.transactions == first.transactions
    assert sum("SET attributes" in s for s in second.statements) == 1


def test_set_attributes__of_a_workflow_without_steps_go_with_its_settle(define, harness):
    workerflow.start(define(lambda self: self.set_attributes(customer="c-0")), key="bare")
    harness.drain()
    instance = WorkflowInstance.objects.get(key="bare")
    assert (instance.status, instance.attributes) == ("completed", {"customer": "c-0"})


def test_set_attributes__of_a_failing_workflow_are_kept(define, harness):
    def execute(self):
        self.set_attributes(customer="c-f")
        raise ValueError("no")

    workerflow.start(define(execute), key="fails")
    harness.drain()
    assert _attributes("fails") == {"customer": "c-f"}


def test_check_replay__a_changed_set_attributes_call_is_not_drift(define, harness):
    def first(self):
        self.set_attributes(customer="c-1")
        self.wait("go", "go")

    def changed(self):
        self.set_attributes(customer="c-2", more=1)
        self.wait("go", "go")

    definition = define(first, name="test-drift-attrs")
    workerflow.start(definition, key="d1")
    harness.drain()
    definition.execute = changed
    out = StringIO()
    call_command("workerflow", "check-replay", stdout=out)
    assert "0 would break" in out.getvalue()


# Definitions ----------------------------------------------------------------------------


def test_attribute_filters__a_bad_name_is_refused_when_the_class_is_declared():
    with pytest.raises(WorkflowDefinitionError, match=r"attribute_filters.*not an identifier"):

        class Bad(WorkflowDefinition, register=False):
            name = "test-bad-filters"
            attribute_filters = ["customer", "order-id"]

            def execute(self):
                return None

    with pytest.raises(WorkflowDefinitionError, match="must be a list"):

        class Text(WorkflowDefinition, register=False):
            name = "test-text-filters"
            attribute_filters = "customer"

            def execute(self):
                return None


def test_reserved_names__cover_every_lookup_of_a_json_key():
    lookups = set(JSONField.get_lookups()) | set(AttributeKey.get_lookups())
    assert lookups <= values.RESERVED_NAMES | {"exact"}


# The lookup: the truth on both databases -----------------------------------------------

ROWS = {
    "s1": {"customer": "c-42", "region": "eu"},
    "s2": {"customer": "c-43", "region": "eu"},
    "n1": {"customer": 42, "score": 1.5},
    "n2": {"customer": "42", "score": 1},
    "b1": {"vip": True, "score": 1.0},
    "b2": {"vip": False, "one": 1},
    "b3": {"vip": 1, "one": True},
    "e1": {"region": "eu"},
    "u1": {"customer": "Ünïcode ✓"},
    "q1": {"customer": 'quote " and \\ backslash'},
    "none": None,
}


@pytest.fixture
def stored(define):
    definition = define(lambda self: None)
    for key, attributes in ROWS.items():
        workerflow.start(definition, key=key, attributes=attributes)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("customer", "c-42"),
        ("customer", "42"),
        ("customer", 42),
        ("customer", 42.0),
        ("customer", "Ünïcode ✓"),
        ("customer", 'quote " and \\ backslash'),
        ("region", "eu"),
        ("score", 1),
        ("score", 1.5),
        ("vip", True),
        ("vip", False),
        ("vip", 1),
        ("one", 1),
        ("one", True),
        ("missing", "x"),
        ("missing", 0),
    ],
)
def test_filter__finds_exactly_the_instances_a_python_filter_finds(stored, name, value):
    found = set(
        WorkflowInstance.objects.filter(**{f"attributes__{name}": value}).values_list(
            "key", flat=True
        )
    )
    truth = {key for key, held in ROWS.items() if values.matches(held, name, value)}
    assert found == truth


def test_filter__missing_keys_and_isnull_work_as_djangos(stored):
    lacking = set(
        WorkflowInstance.objects.filter(attributes__region__isnull=True).values_list(
            "key", flat=True
        )
    )
    assert lacking == {k for k, held in ROWS.items() if not held or "region" not in held}
    assert set(
        WorkflowInstance.objects.filter(attributes__has_key="vip").values_list("key", flat=True)
    ) == {"b1", "b2", "b3"}


def test_filter__several_attributes_are_anded(stored):
    found = WorkflowInstance.objects.filter(attributes__customer="c-42", attributes__region="eu")
    assert list(found.values_list("key", flat=True)) == ["s1"]


def test_filter__on_postgresql_compiles_to_containment(stored):
    query = str(WorkflowInstance.objects.filter(attributes__customer="c-42").query)
    if connection.vendor == "postgresql":
        assert '"attributes" @> {"customer": "c-42"}' in query
    else:
        assert "JSON_EXTRACT" in query.upper()


@pytest.mark.parametrize(
    ("text", "value"),
    [("c-42", "c-42"), ("42", 42), ("1.5", 1.5), ("true", True), ('"42"', "42"), ("nan", "nan")],
)
def test_parse_text__reads_a_typed_value(text, value):
    parsed = values.parse_text(text)
    assert parsed == value and type(parsed) is type(value)  # noqa: PT018 - value and type


@pytest.mark.parametrize(("name", "value"), [("customer", "c-42"), ("vip", True), ("score", 1)])
def test_exclude__keeps_the_instances_without_the_value_even_without_the_key(stored, name, value):
    kept = set(
        WorkflowInstance.objects.exclude(**{f"attributes__{name}": value}).values_list(
            "key", flat=True
        )
    )
    assert kept == {key for key, held in ROWS.items() if not values.matches(held, name, value)}


def test_start__a_debounced_start_stores_them_and_a_later_one_keeps_them(define):
    definition = define(lambda self: None)
    workerflow.start(definition, key="deb", debounce=5, attributes={"customer": "c-1"})
    again = workerflow.start(definition, key="deb", debounce=5, attributes={"customer": "c-2"})
    assert again.attributes == {"customer": "c-1"}
    assert _attributes("deb") == {"customer": "c-1"}
