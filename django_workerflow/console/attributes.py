"""Instance attributes in the admin: the search box's ``name=value`` terms, the list filters
definitions ask for (``attribute_filters``), and the instance page's links.

Every query here is ``filter(attributes__<name>=value)``, which the PostgreSQL index serves
(:mod:`django_workerflow.models.attributes`). A filter's choices are the values held by the
:data:`SAMPLE` most recent instances (one read of that many rows through the list's own
order index, shared by the filters of a page), never a ``DISTINCT`` over the table: a value
beyond them is found by search.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any, TypeVar
from urllib.parse import urlencode

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.text import smart_split, unescape_string_literal

from django_workerflow import registry
from django_workerflow.exceptions import WorkflowInputError
from django_workerflow.models import WorkflowInstance
from django_workerflow.values import attributes as values
from django_workerflow.values.attributes import Scalar

#: The most recent instances whose attributes a filter's choices are read from.
SAMPLE = 2_000
#: The most choices a filter lists (the most frequent in the sample).
MAX_CHOICES = 25
# The request attribute holding the sample, read once per page for all its filters.
_REQUEST_CACHE = "workerflow_recent_attributes"
#: The change list parameter of attribute ``name``'s filter: ``attr_customer``.
PARAMETER_PREFIX = "attr_"


# The search box -------------------------------------------------------------------------


def split_search(term: str) -> tuple[dict[str, Scalar], str]:
    """The ``name=value`` attribute terms of a search (the value read by
    :func:`~django_workerflow.values.attributes.parse_text`), and the rest of the text for
    the key and definition search. ``customer="c 42"`` quotes a value with spaces; a term
    whose left side is not an attribute name is left to the text search."""
    wanted: dict[str, Scalar] = {}
    rest = []
    for part in smart_split(term):
        name, equals, text = part.partition("=")
        if equals and text and _is_name(name):
            if text[0] in "'" and text[-1] == text[0] and len(text) >= 2:
                text = unescape_string_literal(text)
            wanted[name] = values.parse_text(text)
        else:
            rest.append(part)
    return wanted, " ".join(rest)


def parse_condition(text: str) -> tuple[str, Scalar]:
    """``NAME=VALUE`` (``manage.py workerflow list --attr``) as a name and a typed value,
    or WorkflowInputError saying what is wrong and how to write it."""
    name, equals, value = text.partition("=")
    if not equals or not name:
        raise WorkflowInputError(
            f"--attr {text!r} is not NAME=VALUE: write it as --attr customer=c-42 (repeat "
            "--attr to require several attributes)."
        )
    values.check_name(name, what="The attribute name of --attr")
    return name, values.parse_text(value)


def text(instance: WorkflowInstance) -> str:
    """The attributes of ``instance`` on one line, by name: ``customer=c-42, vip=true``
    ("" without any); a string that would read as another type is quoted."""
    return ", ".join(f"{name}={_typed_text(value)}" for name, value in _sorted(instance))


Instances = TypeVar("Instances", bound=QuerySet[WorkflowInstance])


def search(queryset: Instances, wanted: dict[str, Scalar]) -> Instances:
    """The instances holding every one of ``wanted``'s values (AND)."""
    return queryset.filter(**{f"attributes__{name}": value for name, value in wanted.items()})


def _is_name(name: str) -> bool:
    try:
        values.check_name(name)
    except WorkflowInputError:
        return False
    return True


# List filters --------------------------------------------------------------------------


def filtered_names() -> list[str]:
    """The attributes the registered definitions name in ``attribute_filters``, each once,
    in the order first named."""
    names: dict[str, None] = {}
    for definition in registry.definitions():
        for name in definition.attribute_filters:
            names.setdefault(name, None)
    return list(names)


def list_filters() -> list[type[admin.SimpleListFilter]]:
    """A list filter per attribute of :func:`filtered_names`."""
    return [_filter_class(name) for name in filtered_names()]


def _filter_class(name: str) -> type[admin.SimpleListFilter]:
    return type(
        f"AttributeFilter_{name}",
        (AttributeFilter,),
        {
            "attribute": name,
            "title": f"attribute {name}",
            "parameter_name": PARAMETER_PREFIX + name,
        },
    )


class AttributeFilter(admin.SimpleListFilter):
    """Instances holding one value of an attribute; its choices are the values the most
    recent instances hold (a subclass per attribute names it)."""

    attribute: str = ""

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        chosen = recent_values(self.attribute, _recent(request))[:MAX_CHOICES]
        selected = self._selected()
        if selected is not None and not any(_same(selected, value) for value in chosen):
            chosen.append(selected)  # shown as chosen, even if not among the recent ones
        chosen.sort(key=lambda value: (type(value).__name__, value))
        return [(json.dumps(value), _shown(value)) for value in chosen]

    def queryset(
        self, request: HttpRequest, queryset: QuerySet[WorkflowInstance]
    ) -> QuerySet[WorkflowInstance]:
        selected = self._selected()
        if selected is None:
            return queryset
        return queryset.filter(**{f"attributes__{self.attribute}": selected})

    def _selected(self) -> Scalar | None:
        """The chosen value, read from the parameter's JSON (a string as itself)."""
        text = self.value()
        if text is None:
            return None
        try:
            value = json.loads(text)
        except ValueError:
            return str(text)
        return value if isinstance(value, str | int | float | bool) else str(text)


def _recent(request: HttpRequest) -> list[Any]:
    """The attributes of the :data:`SAMPLE` most recent instances (read in the list's order,
    so through its index), read once per request for all the filters."""
    cached = getattr(request, _REQUEST_CACHE, None)
    if cached is None:
        cached = list(
            WorkflowInstance.objects.order_by("-created_at", "-id").values_list(
                "attributes", flat=True
            )[:SAMPLE]
        )
        setattr(request, _REQUEST_CACHE, cached)
    return cached


def recent_values(name: str, recent: list[Any]) -> list[Scalar]:
    """The values of attribute ``name`` among the ``recent`` instances' attributes, the most
    frequent first."""
    # Keyed by type too: True and 1 are different values (a plain key would merge them).
    found: Counter[tuple[bool, Any]] = Counter()
    for held in recent:
        if isinstance(held, dict) and name in held:
            found[(isinstance(held[name], bool), held[name])] += 1
    return [value for (_is_bool, value), _count in found.most_common()]


def _same(first: Scalar, second: Scalar) -> bool:
    return isinstance(first, bool) == isinstance(second, bool) and first == second


def _shown(value: Scalar) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# The instance page ---------------------------------------------------------------------


def links(instance: WorkflowInstance) -> list[tuple[str, str, str]]:
    """Each attribute of ``instance`` as (name, value as shown, the change list's query
    string finding the instances with the same value), by name."""
    return [
        (name, _shown(value), "?" + urlencode({"q": f"{name}={_typed_text(value)}"}))
        for name, value in _sorted(instance)
    ]


def _sorted(instance: WorkflowInstance) -> list[tuple[str, Scalar]]:
    held = instance.attributes if isinstance(instance.attributes, dict) else {}
    return sorted(held.items())


def _typed_text(value: Scalar) -> str:
    """``value`` as a search term or ``--attr`` reads it back."""
    return json.dumps(value) if not isinstance(value, str) else _search_text(value)


def _search_text(text: str) -> str:
    """A string as a search term reads it back: quoted if it would read as another type or
    holds a space."""
    if values.parse_text(text) != text or type(values.parse_text(text)) is not str:
        return json.dumps(text)
    if any(character.isspace() for character in text) or '"' in text or "'" in text:
        return json.dumps(text)
    return text
