"""Bad input, one matrix per kind of value, shared by every module that checks validation.

tests/test_api.py and tests/test_semantics.py check how a refusal behaves (the error's type,
that nothing is written, that it can be caught inside ``execute()``);
tests/reliability/test_bad_input.py checks what it says. Both try the same cases from here.
Each case is ``pytest.param(value, problem)``: ``problem`` is a fragment the error message
holds. :func:`values` drops it for a test that only checks the behaviour.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import django_workerflow as workerflow

TOO_LONG_IDENTIFIER = "x" * 201  # identifiers (event names, step ids) allow 200 characters

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
    pytest.param("k" * 256, "256 characters", id="too-long"),
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
    pytest.param(10**12, "longer than the limit", id="absurd-seconds"),
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
]
"""Unusable ``max_attempts`` of a run step."""

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
