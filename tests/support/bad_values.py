"""Bad input: the values each kind of argument refuses, and the one matrix of call sites
that tries them.

Each value case is ``pytest.param(value, problem)``, ``problem`` a fragment (or a tuple of
fragments) the error message holds. :data:`CALL_SITES` and :data:`INSIDE_EXECUTE` are the
matrix: every place a user value enters the engine, crossed with every bad value of its
kind. tests/reliability/test_bad_input.py runs it: each case is refused with a
WorkflowInputError naming the problem, writes nothing, and inside ``execute()`` can be
caught or else fails the workflow naming it. :func:`values` drops the problem, for the
tests that only try the values (a step result that is not JSON, in test_semantics.py).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import django_workerflow as workerflow

TOO_LONG_IDENTIFIER = "x" * 201  # identifiers (event names, step ids) allow 200 characters
SURROGATE = "\ud800"  # a lone UTF-16 surrogate: not encodable as UTF-8 (both databases)
NUL = "\x00"  # refused by PostgreSQL's text columns, and so refused on both databases

NOT_JSON = [
    pytest.param(object(), "not JSON-serializable", id="object"),
    pytest.param({1, 2}, "not JSON-serializable", id="set"),
    pytest.param(b"bytes", "not JSON-serializable", id="bytes"),
    pytest.param(math.nan, "not JSON-serializable", id="nan"),
    pytest.param({"total": math.inf}, "not JSON-serializable", id="inf-inside"),
    pytest.param(
        {"at": datetime(2026, 1, 1, tzinfo=UTC)}, "not JSON-serializable", id="datetime-inside"
    ),
    pytest.param({"id": uuid.uuid4()}, "not JSON-serializable", id="uuid-inside"),
    pytest.param([{"deep": lambda: 1}], "not JSON-serializable", id="function-inside"),
]
"""Values that are not JSON: workflow inputs, event payloads, step results."""

KEYS = [
    pytest.param("", "must not be empty", id="empty"),
    pytest.param("   ", "must not be empty", id="blank"),
    pytest.param("k" * 256, ("256 characters", "the limit is 255"), id="too-long"),
    pytest.param(42, "must be a string, not int", id="int"),
    pytest.param(["k"], "must be a string, not list", id="list"),
]
"""Unusable instance keys."""

IDENTIFIERS = [
    pytest.param("", "must not be empty", id="empty"),
    pytest.param("  \t", "must not be empty", id="blank"),
    pytest.param(TOO_LONG_IDENTIFIER, "the limit is 200", id="too-long"),
    pytest.param(7, "must be a string, not int", id="int"),
    pytest.param(None, "must be a string, not NoneType", id="none"),
    pytest.param(b"go", "must be a string, not bytes", id="bytes"),
    pytest.param(("a", "b"), "must be a string, not tuple", id="tuple"),
]
"""Unusable identifiers: event names and step ids."""

DURATIONS = [
    pytest.param(-1, "must not be negative", id="negative"),
    pytest.param(timedelta(seconds=-1), "must not be negative", id="negative-timedelta"),
    pytest.param(timedelta(seconds=-0.5), "must not be negative", id="negative-fraction"),
    pytest.param(math.nan, "must be a finite number", id="nan"),
    pytest.param(math.inf, "must be a finite number", id="inf"),
    pytest.param(-math.inf, "must be a finite number", id="minus-inf"),
    pytest.param(timedelta(days=3651), "longer than the limit of 3650 days", id="over-10-years"),
    pytest.param(
        3651 * 86400,  # one day more than WORKERFLOW_MAX_DURATION_DAYS's default, in seconds
        ("longer than the limit", "WORKERFLOW_MAX_DURATION_DAYS"),
        id="over-the-setting",
    ),
    pytest.param(10**12, "longer than the limit", id="absurd-seconds"),
    pytest.param(10**400, "longer than the limit", id="beyond-a-float"),
    pytest.param(-(10**400), "must not be negative", id="beyond-a-float-negative"),
    pytest.param(timedelta(days=100_000), "longer than the limit", id="absurd-timedelta"),
    pytest.param(timedelta.max, "longer than the limit", id="timedelta-max"),
    pytest.param("60", "must be a number of seconds or a timedelta, not str", id="str"),
    pytest.param(True, "not bool", id="bool"),
    pytest.param(None, "not NoneType", id="none"),
]
"""Unusable durations: a sleep's length, a wait's timeout (where None means no timeout)."""

TIMEOUTS = [case for case in DURATIONS if case.id != "none"]
"""Unusable wait timeouts: the durations, without None (no timeout)."""

DEADLINES = [
    pytest.param(datetime(2030, 1, 1, 12, 0), "must be timezone-aware", id="naive"),
    pytest.param("2030-01-01T00:00:00Z", "must be a datetime, not str", id="str"),
    pytest.param(1893456000, "must be a datetime, not int", id="timestamp"),
]
"""Unusable points in time: ``sleep_until``'s time, a wait's ``timeout_at``."""

MAX_ATTEMPTS = [
    pytest.param(0, "must be a whole number >= 1", id="zero"),
    pytest.param(-3, "must be a whole number >= 1", id="negative"),
    pytest.param(2.5, "must be a whole number >= 1", id="float"),
    pytest.param("3", "must be a whole number >= 1", id="str"),
    pytest.param(True, "must be a whole number >= 1", id="bool"),
    pytest.param(2**31, "limit of 2147483647", id="over-the-stored-count"),
]
"""Unusable ``max_attempts`` of a run step."""

UNSTORABLE_TEXT = [
    pytest.param(SURROGATE, "lone UTF-16 surrogate", id="surrogate"),
    pytest.param(NUL, "NUL character", id="nul"),
]
"""Characters no text column stores: refused in any identifier or text the user passes."""


def embedded(shape: Callable[[str], Any], cases: Sequence[Any] = UNSTORABLE_TEXT) -> list[Any]:
    """``cases`` with each character put in place by ``shape`` (``lambda c: f"key{c}"``)."""
    return [pytest.param(shape(case.values[0]), case.values[1], id=case.id) for case in cases]


def nested_levels(levels: int) -> list[Any]:
    """A JSON array nested ``levels`` deep (``[]`` is one level)."""
    value: list[Any] = []
    for _ in range(levels - 1):
        value = [value]
    return value


OPERATIONS_BY_KEY = [
    pytest.param(lambda key: workerflow.send_event(key, "go"), id="send_event"),
    pytest.param(workerflow.pause, id="pause"),
    pytest.param(workerflow.resume, id="resume"),
    pytest.param(workerflow.cancel, id="cancel"),
]
"""The operations that take an instance key: ``operation(key)``."""


def values(matrix: Sequence[Any]) -> list[Any]:
    """The matrix's values without their problem, for a test that checks only behaviour."""
    return [pytest.param(case.values[0], id=case.id) for case in matrix]
