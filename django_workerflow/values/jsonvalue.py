"""The one JSON encoding the engine stores, and the checks on what users hand it.

Values are stored as JSON text, not ``jsonb``, so that what a replay reads back is exactly
what the first run returned: key order and number spelling included.
"""

from __future__ import annotations

import json
import math
import re
from datetime import datetime, timedelta
from typing import Any

from django_workerflow.conf import settings
from django_workerflow.exceptions import WorkflowInputError
from django_workerflow.values import storable

_encoder = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
_decode = json.JSONDecoder().decode

MAX_IDENTIFIER_LENGTH = 200
# Python's JSON code recurses once per level: a value nested deeper than this might not be
# readable again where the stack is already deep (a tick), so it is refused up front.
MAX_NESTING = 100
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKET = re.compile(r"[\[\]{}]")


def dumps(value: Any, *, what: str) -> str:
    """Encode ``value`` as stored JSON text, or raise WorkflowInputError naming ``what``."""
    try:
        text = _encoder.encode(value)
    except Exception as exc:  # TypeError, ValueError, RecursionError, or user container code
        raise WorkflowInputError(
            f"{what} is not JSON-serializable: {storable.describe(exc)}"
        ) from exc
    check_nesting(text, what=what)
    if not text.isascii():
        # ensure_ascii=False keeps lone surrogates as they are, and UTF-8 cannot hold them.
        storable.check_text(text, what=what)
    limit = settings.MAX_JSON_BYTES
    if len(text) > limit // 4 and len(text.encode()) > limit:
        raise WorkflowInputError(
            f"{what} is {len(text.encode())} bytes of JSON, more than the limit of {limit} "
            "bytes (setting WORKERFLOW_MAX_JSON_BYTES)."
        )
    return text


def check_nesting(text: str, *, what: str) -> None:
    """Raise WorkflowInputError naming ``what`` if the JSON ``text`` nests deeper than
    ``MAX_NESTING``. Call it before parsing text a user typed: Python's parser raises
    RecursionError, not ValueError, for text nested deeper than the stack allows."""
    if text.count("[") + text.count("{") <= MAX_NESTING:
        return
    depth = deepest = 0
    for bracket in _BRACKET.findall(_STRING.sub("", text)):
        depth += 1 if bracket in "[{" else -1
        deepest = max(deepest, depth)
    if deepest > MAX_NESTING:
        raise WorkflowInputError(
            f"{what} is nested {deepest} levels deep, more than the JSON nesting limit of "
            f"{MAX_NESTING} levels."
        )


def loads(text: str | None) -> Any:
    return None if text is None else _decode(text)


def fresh_copy(value: Any) -> Any:
    """A deep copy of a value read back from JSON, so that changing it changes no other copy."""
    if isinstance(value, dict):
        return {key: fresh_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [fresh_copy(item) for item in value]
    return value


def check_identifier(value: Any, *, what: str, max_length: int = MAX_IDENTIFIER_LENGTH) -> str:
    """Return ``value`` if it is a usable step id, event name or key, else raise."""
    if not isinstance(value, str):
        raise WorkflowInputError(f"{what} must be a string, not {type(value).__name__}.")
    if not value or not value.strip():
        raise WorkflowInputError(f"{what} must not be empty.")
    if len(value) > max_length:
        raise WorkflowInputError(
            f"{what} {value[:40]!r}... is {len(value)} characters long; the limit is {max_length}."
        )
    return storable.check_text(value, what=what)


def to_timedelta(value: Any, *, what: str) -> timedelta:
    """Accept seconds (int/float) or a timedelta that is finite, >= 0 and not absurd."""
    if isinstance(value, bool) or not isinstance(value, int | float | timedelta):
        raise WorkflowInputError(
            f"{what} must be a number of seconds or a timedelta, not {type(value).__name__}."
        )
    seconds: float
    if isinstance(value, int):
        seconds = value  # compared as it is: float() of one beyond a float's range overflows
    elif isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise WorkflowInputError(f"{what} must be a finite number of seconds, not {value}.")
        seconds = value
    else:
        seconds = value.total_seconds()
    if seconds < 0:
        raise WorkflowInputError(f"{what} must not be negative (got {seconds} seconds).")
    max_days = settings.MAX_DURATION_DAYS
    if seconds > max_days * 86400:
        raise WorkflowInputError(
            f"{what} of {seconds} seconds is longer than the limit of {max_days} days "
            "(setting WORKERFLOW_MAX_DURATION_DAYS)."
        )
    return value if isinstance(value, timedelta) else timedelta(seconds=float(seconds))


def check_aware(value: Any, *, what: str) -> datetime:
    if not isinstance(value, datetime):
        raise WorkflowInputError(f"{what} must be a datetime, not {type(value).__name__}.")
    if value.tzinfo is None or value.utcoffset() is None:
        raise WorkflowInputError(
            f"{what} must be timezone-aware; got the naive datetime {value.isoformat()}. "
            "Use django.utils.timezone.now() or attach a tzinfo."
        )
    return value
