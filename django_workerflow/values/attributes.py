"""An instance's searchable attributes: small named values to find it by.

A workflow sets them with ``self.set_attributes(customer="c-42", region="eu")`` and a caller
with ``start(..., attributes={...})``; they are kept on the instance row as one JSON object
(``WorkflowInstance.attributes``), queried with Django's usual API
(``filter(attributes__customer="c-42")``) and shown and filtered in the admin.

Like progress, attributes are not steps: replays make the same calls again, a value equal
to the one stored is never written twice, a changed call is never drift, and the last
value set wins. Each value is a string, a number or a boolean; ``None`` removes the
attribute. Everything is checked before anything is held, so a refused call changes
nothing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from django_workerflow.exceptions import WorkflowInputError
from django_workerflow.values import storable

#: The most attributes one instance holds.
MAX_ATTRIBUTES = 20
#: The longest attribute name, in characters.
MAX_NAME_LENGTH = 64
#: The longest string value, in characters.
MAX_TEXT_LENGTH = 200
#: The largest integer stored (and compared) exactly: a double holds every one up to 2**53.
MAX_INTEGER = 2**53

#: A stored value; ``None`` in a change removes the attribute.
Scalar = str | int | float | bool

# Django's lookups on a JSON field and on a key of one: ``filter(attributes__in=...)``
# means the lookup, not the key, so no attribute may be named as one (a test checks this
# list against Django's).
RESERVED_NAMES = frozenset(
    {
        "contained_by",
        "contains",
        "endswith",
        "exact",
        "gt",
        "gte",
        "has_any_keys",
        "has_key",
        "has_keys",
        "icontains",
        "iendswith",
        "iexact",
        "in",
        "iregex",
        "isnull",
        "istartswith",
        "lt",
        "lte",
        "range",
        "regex",
        "startswith",
    }
)


def check_name(name: object, *, what: str = "An attribute name") -> str:
    """Return ``name`` if it can name an attribute, else raise WorkflowInputError."""
    if not isinstance(name, str):
        raise WorkflowInputError(f"{what} must be a string, not {type(name).__name__}.")
    if not name.isascii() or not name.isidentifier():
        raise WorkflowInputError(
            f"{what} {name[:80]!r} is not an identifier: use ASCII letters, digits and "
            "underscores, not starting with a digit (e.g. 'customer' or 'order_id'), so that "
            "it can be queried as filter(attributes__<name>=...)."
        )
    if len(name) > MAX_NAME_LENGTH:
        raise WorkflowInputError(
            f"{what} {name[:40]!r}... is {len(name)} characters long; the limit is "
            f"{MAX_NAME_LENGTH}."
        )
    if name in RESERVED_NAMES or name.startswith("_"):
        raise WorkflowInputError(
            f"{what} {name!r} is reserved (Django reads attributes__{name} as a lookup, or a "
            "leading underscore as private); choose another name, e.g. "
            f"'{name.strip('_')}_value'."
        )
    return name


def check_value(name: str, value: object) -> Scalar | None:
    """Return ``value`` if attribute ``name`` may hold it (None: remove it), else raise
    WorkflowInputError saying what is wrong and what to store instead."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        if len(value) > MAX_TEXT_LENGTH:
            raise WorkflowInputError(
                f"Attribute {name!r} is a string of {len(value)} characters, more than the "
                f"limit of {MAX_TEXT_LENGTH}: attributes are short values to search by; "
                "store the text in the input or a step's result and an identifier here."
            )
        return storable.check_text(value, what=f"Attribute {name!r}")
    if isinstance(value, int):
        if abs(value) > MAX_INTEGER:
            raise WorkflowInputError(
                f"Attribute {name!r} is {value}, beyond the limit of +/-{MAX_INTEGER} (the "
                "largest integer a query compares exactly); store it as a string."
            )
        return value
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise WorkflowInputError(f"Attribute {name!r} must be a finite number, not {value!r}.")
        return value
    raise WorkflowInputError(
        f"Attribute {name!r} is a {type(value).__name__} ({_sample(value)}); an attribute "
        "holds one string, number or boolean (None removes it). Store an identifier or a "
        "summary of it (e.g. its id), or one attribute per field you search by."
    )


def checked(changes: object, *, what: str) -> dict[str, Scalar | None]:
    """``changes`` (names to values, None to remove) as held, or WorkflowInputError naming
    ``what`` (``"set_attributes()"``) for the first thing wrong with them."""
    if not isinstance(changes, Mapping):
        raise WorkflowInputError(
            f"{what} takes a dict of attribute names to values, not {type(changes).__name__}."
        )
    found: dict[str, Scalar | None] = {}
    for name, value in changes.items():
        check_name(name, what=f"{what} got an attribute name that")
        found[name] = check_value(name, value)
    return found


def merged(stored: Mapping[str, Scalar], changes: Mapping[str, Scalar | None]) -> dict[str, Scalar]:
    """``stored`` with ``changes`` applied (None removes), or WorkflowInputError when that
    is more than :data:`MAX_ATTRIBUTES` attributes."""
    result = dict(stored)
    for name, value in changes.items():
        if value is None:
            result.pop(name, None)
        else:
            result[name] = value
    if len(result) > MAX_ATTRIBUTES:
        raise WorkflowInputError(
            f"An instance holds at most {MAX_ATTRIBUTES} attributes; these changes make "
            f"{len(result)} ({', '.join(sorted(result))}). Remove some (set them to None) "
            "or combine them."
        )
    return result


def same(first: Mapping[str, Scalar] | None, second: Mapping[str, Scalar] | None) -> bool:
    """True if both hold the same values of the same JSON types (``True`` is not ``1``)."""
    return dumps(first) == dumps(second)


def dumps(attributes: Mapping[str, Scalar] | None) -> str | None:
    """The JSON text stored for ``attributes`` (None for none: the column stays NULL)."""
    if not attributes:
        return None
    return json.dumps(dict(attributes), sort_keys=True, ensure_ascii=False)


def of_start(attributes: object, *, what: str) -> dict[str, Scalar] | None:
    """The attributes a start gives a new instance (None: none), checked."""
    if attributes is None:
        return None
    return merged({}, checked(attributes, what=what)) or None


def matches(attributes: Mapping[str, Any] | None, name: str, value: Scalar) -> bool:
    """True if ``attributes`` hold ``value`` under ``name``, as a query compares: equal
    values of the same JSON type (a boolean is not a number, 1 is 1.0)."""
    if not attributes or name not in attributes:
        return False
    held = attributes[name]
    return isinstance(held, bool) == isinstance(value, bool) and held == value


def parse_text(text: str) -> Scalar:
    """A value typed in a search box or on a command line: ``true``/``false``, an integer,
    a decimal number, or else the text itself (quote it, ``"42"``, to mean the string)."""
    if len(text) >= 2 and text[0] == text[-1] == '"':
        try:
            quoted = json.loads(text)
        except ValueError:
            return text[1:-1]
        return quoted if isinstance(quoted, str) else text[1:-1]
    if text in ("true", "false"):
        return text == "true"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = float(text)
    except ValueError:
        return text
    return number if math.isfinite(number) else text


def _sample(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
