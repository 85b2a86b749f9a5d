"""Attributes in manage.py workerflow: list --attr, show (text and JSON) and the export."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

import django_workerflow as workerflow
from django_workerflow.deploy import exports
from django_workerflow.models import WorkflowInstance

pytestmark = pytest.mark.django_db


@pytest.fixture
def cli_orders(define):
    definition = define(lambda self: None, name="test-cli-order")
    workerflow.start(definition, key="o-1", attributes={"customer": "c-42", "region": "eu"})
    workerflow.start(definition, key="o-2", attributes={"customer": "c-42", "region": "us"})
    workerflow.start(definition, key="o-3", attributes={"customer": "42", "vip": True})
    workerflow.start(definition, key="o-4")


def run(*args: str) -> str:
    out = StringIO()
    call_command("workerflow", *args, stdout=out)
    return out.getvalue()


def _listed(*args: str) -> list[str]:
    document = json.loads(run("list", "--format", "json", *args))
    return [row["key"] for row in document["instances"]]


def test_list__attr_filters_and_repeats_are_anded(cli_orders):
    assert _listed("--attr", "customer=c-42") == ["o-2", "o-1"]
    assert _listed("--attr", "customer=c-42", "--attr", "region=eu") == ["o-1"]
    assert _listed("--attr", "vip=true") == ["o-3"]
    assert _listed("--attr", 'customer="42"') == ["o-3"]
    assert _listed("--attr", "customer=42") == []


def test_list__text_output_lists_the_matching_keys(cli_orders):
    output = run("list", "--attr", "region=us")
    assert "o-2" in output and "o-1" not in output  # noqa: PT018 - one listed, one not


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ("customer", "is not NAME=VALUE"),
        ("=c-42", "is not NAME=VALUE"),
        ("order-id=1", "is not an identifier"),
        ("in=1", "is reserved"),
    ],
)
def test_list__bad_attr_syntax_is_a_clear_command_error(cli_orders, given, words):
    with pytest.raises(CommandError, match=words):
        run("list", "--attr", given)


def test_show__prints_the_attributes(cli_orders):
    output = run("show", "o-3")
    assert 'Attributes: customer="42", vip=true' in output
    assert "Attributes:" not in run("show", "o-4")


def test_show_and_list_json__carry_the_attributes(cli_orders):
    document = json.loads(run("show", "o-1", "--format", "json"))
    assert document["attributes"] == {"customer": "c-42", "region": "eu"}
    assert json.loads(run("show", "o-4", "--format", "json"))["attributes"] == {}
    listed = json.loads(run("list", "--format", "json", "--attr", "vip=true"))
    assert listed["instances"][0]["attributes"] == {"customer": "42", "vip": True}


def test_export__carries_the_attributes(cli_orders):
    history = exports.export_history(WorkflowInstance.objects.get(key="o-1"))
    assert history["attributes"] == {"customer": "c-42", "region": "eu"}
