"""Every limit accepts the value at the limit, and docs/concepts.md lists each one.

One past each limit is refused with a WorkflowInputError naming it: those are cases of the
bad-input matrix (tests/reliability/test_bad_input.py, values in tests/support/bad_values.py).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import django_workerflow as workerflow
from django_workerflow.conf import settings
from django_workerflow.models import Step, WorkflowInstance, WorkflowStatus
from django_workerflow.values import jsonvalue, storable
from tests.support.bad_values import nested_levels

pytestmark = pytest.mark.django_db

CONCEPTS = Path(__file__).resolve().parents[2] / "docs" / "concepts.md"


def test_json_nesting__the_limit_passes(define, workerflow_harness):
    definition = define(lambda self: None)
    workerflow.start(definition, input=nested_levels(jsonvalue.MAX_NESTING))
    assert WorkflowInstance.objects.count() == 1


def test_instance_key__255_characters_pass(define, workerflow_harness):
    definition = define(lambda self: None)
    assert workerflow.start(definition, key="k" * 255).key == "k" * 255


def test_max_attempts__the_largest_stored_count_is_accepted(define, workerflow_harness):
    instance = workerflow.start(
        define(lambda self: self.run("step", lambda: 1, max_attempts=storable.MAX_INTEGER))
    )
    workerflow_harness.drain()
    instance.refresh_from_db()
    assert instance.status == WorkflowStatus.COMPLETED
    assert Step.objects.get(instance=instance).max_attempts == storable.MAX_INTEGER


def test_docs__the_limits_table_states_the_limits_the_code_enforces():
    section = re.search(r"## Limits\n(.*?)\n## ", CONCEPTS.read_text(), re.DOTALL)
    assert section, "docs/concepts.md has no Limits section"
    table = section.group(1)
    for figure in (
        f"{settings.MAX_JSON_BYTES} bytes",
        f"{jsonvalue.MAX_NESTING} levels",
        "1 to 255 characters",
        f"1 to {jsonvalue.MAX_IDENTIFIER_LENGTH} characters",
        f"1 to {storable.MAX_INTEGER}",
        f"{settings.MAX_DURATION_DAYS} days",
        f"{storable.MAX_ERROR_NAME_LENGTH} characters",
        f"{storable.MAX_ERROR_MESSAGE_LENGTH} characters",
        storable.TRUNCATION_MARKER,
    ):
        assert figure in table, f"the Limits table does not state {figure!r}"
