"""Sensitive fields: the paths a definition names, and their values masked for display.

A path names a value inside one of four places, its first segment:

- ``input.card``: the instance's input; ``result.token``: its result;
- ``events.payment.card``: the payload of every inbound event named ``payment`` (and the
  value of the wait steps that received one);
- ``steps.charge.card_last4``: the value of the step ``charge`` (a run or child step's
  result, a wait step's payload).

The segment after ``events`` or ``steps`` is a shell-style pattern (``charge-*`` names every
step whose id starts with ``charge-``). The segments after it are keys of nested objects;
``*`` is every key. A list met on the way is walked through: the rest of the path applies to
each of its items (``input.cards.number`` masks the number of every card in a list). A path
that ends on an object or a list masks it whole; a path that meets a scalar, or a key that is
absent, masks nothing. A segment written in square brackets is taken as it is, dots included
(``steps[fetch.v2].token``).

Masking returns a copy: it never changes the value it is given. Error texts (messages and
tracebacks) are masked by exact occurrence: every sensitive value of the instance, as text,
of at least :data:`MIN_TEXT_LENGTH` characters, is replaced wherever it appears.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from django.db import models

#: What a masked value is shown as.
MASK = "••••"
#: Sensitive values shorter than this are not searched for in error texts: a one- or
#: two-character value ("1", "eu") would mask unrelated text everywhere.
MIN_TEXT_LENGTH = 3


class Section(models.TextChoices):
    """Where a sensitive path points: the first segment of the path."""

    INPUT = "input"
    RESULT = "result"
    EVENTS = "events"
    STEPS = "steps"


NAMED_SECTIONS = frozenset({Section.EVENTS, Section.STEPS})
ALL_KEYS = "*"


@dataclass(frozen=True, slots=True)
class SensitivePath:
    """One declared path, read: its section, the event name or step id pattern (events and
    steps only) and the keys below."""

    text: str
    section: Section
    name: str
    keys: tuple[str, ...]

    def names(self, section: Section, name: str) -> bool:
        """True when the path points into ``section`` (and, for events and steps, into
        the one named ``name``)."""
        if self.section != section:
            return False
        return section not in NAMED_SECTIONS or fnmatch.fnmatchcase(name, self.name)


class PathError(ValueError):
    """A sensitive path that cannot be read; its message says what is wrong."""


def parse(text: object) -> SensitivePath:
    """Read a declared path; raise :class:`PathError` saying what is wrong with it."""
    if not isinstance(text, str):
        raise PathError(f"{text!r} is a {type(text).__name__}, not a dotted path string")
    segments = _segments(text)
    head, rest = segments[0], segments[1:]
    if head not in Section.values:
        raise PathError(
            f"{text!r} starts with {head!r}; start it with one of "
            + ", ".join(repr(section) for section in Section.values)
        )
    section = Section(head)
    if section in NAMED_SECTIONS:
        if not rest:
            what = "event name" if section == Section.EVENTS else "step id"
            raise PathError(f"{text!r} names no {what}; write e.g. '{head}.NAME.field'")
        return SensitivePath(text, section, rest[0], tuple(rest[1:]))
    return SensitivePath(text, section, "", tuple(rest))


def problems(declared: object) -> list[str]:
    """Every problem with a definition's ``sensitive`` attribute (empty: it is fine)."""
    if isinstance(declared, str) or not isinstance(declared, list | tuple):
        return [
            f"`sensitive` = {declared!r} must be a list of dotted paths such as "
            "['input.card', 'steps.charge.card_last4']"
        ]
    found = []
    for text in declared:
        try:
            parse(text)
        except PathError as exc:
            found.append(f"`sensitive` path {exc}")
    return found


def parse_all(declared: Iterable[str]) -> tuple[SensitivePath, ...]:
    """The paths of a ``sensitive`` attribute already checked by :func:`problems`."""
    return tuple(parse(text) for text in declared)


@dataclass(frozen=True, slots=True)
class Masker:
    """Masks the sensitive values of one instance; without paths (a definition that names
    none, or a reader allowed to see them) it returns every value as it is."""

    paths: tuple[SensitivePath, ...] = ()
    #: The instance's sensitive values as text, longest first, searched for in errors.
    secrets: tuple[str, ...] = ()
    #: Opens the values sealed at rest (:mod:`django_workerflow.values.sealing`) before
    #: they are masked or shown; by default, values are taken as they are.
    opener: Callable[[Any], Any] | None = None

    @classmethod
    def build(
        cls,
        paths: Iterable[SensitivePath],
        *,
        input: Any = None,
        result: Any = None,
        events: Iterable[tuple[str, Any]] = (),
        steps: Iterable[tuple[str, str, Any]] = (),
        opener: Callable[[Any], Any] | None = None,
    ) -> Masker:
        """A masker of ``paths`` that also knows the values they point at, for errors:
        ``events`` are (event name, payload) pairs, ``steps`` (step id, event name or "",
        value) triples; ``opener`` opens sealed values."""
        paths = tuple(paths)
        if not paths:
            return cls(opener=opener)
        masker = cls(paths, opener=opener)
        found: set[str] = set()
        places = [(Section.INPUT, "", input), (Section.RESULT, "", result)]
        places += [(Section.EVENTS, name, payload) for name, payload in events]
        for step_id, event_name, value in steps:
            places.append((Section.STEPS, step_id, value))
            if event_name:
                places.append((Section.EVENTS, event_name, value))
        for section, name, value in places:
            for path in masker.paths:
                if path.names(section, name):
                    found.update(_texts(reached(masker.open(value), path.keys)))
        secrets = sorted((text for text in found if len(text) >= MIN_TEXT_LENGTH), key=len)
        return cls(paths, tuple(reversed(secrets)), opener)

    @property
    def active(self) -> bool:
        """True when the masker hides something."""
        return bool(self.paths)

    def input(self, value: Any) -> Any:
        """The instance's input, masked."""
        return self._mask(Section.INPUT, "", value)

    def result(self, value: Any) -> Any:
        """The instance's result, masked."""
        return self._mask(Section.RESULT, "", value)

    def event(self, event_name: str, payload: Any) -> Any:
        """The payload of an inbound event named ``event_name``, masked."""
        return self._mask(Section.EVENTS, event_name, payload)

    def step(self, step_id: str, value: Any, event_name: str = "") -> Any:
        """The value of step ``step_id``, masked; a wait step's (``event_name``: the event it
        received) is masked as that event's payload too."""
        value = self._mask(Section.STEPS, step_id, value)
        return self.event(event_name, value) if event_name else value

    def text(self, text: str) -> str:
        """An error message or traceback with every sensitive value of the instance that
        it contains replaced by :data:`MASK`."""
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        return text

    def open(self, value: Any) -> Any:
        """``value`` with its sealed values opened (as it is without an opener)."""
        return value if self.opener is None else self.opener(value)

    def _mask(self, section: Section, name: str, value: Any) -> Any:
        value = self.open(value)
        for path in self.paths:
            if path.names(section, name):
                value = replaced(value, path.keys, _to_mask)
        return value


def _segments(text: str) -> list[str]:
    """The segments of a dotted path; a segment in square brackets is taken as it is."""
    segments: list[str] = []
    current, index = "", 0
    closed = False  # the current segment was bracketed: a '.', a '[' or the end follows
    while index < len(text):
        char = text[index]
        if char == "." or (char == "[" and (current or closed)):
            segments.append(_segment(text, current))
            current, closed = "", False
            index += char == "."
            continue
        if closed:
            raise PathError(f"{text!r} has text right after ']'; put a '.' between")
        if char == "[":
            end = text.find("]", index)
            if end == -1:
                raise PathError(f"{text!r} opens a '[' it does not close; close it with ']'")
            current, closed, index = text[index + 1 : end], True, end + 1
            continue
        current += char
        index += 1
    segments.append(_segment(text, current))
    return segments


def _segment(text: str, segment: str) -> str:
    if not segment.strip():
        raise PathError(
            f"{text!r} has an empty segment; separate names with single dots, as in "
            "'input.card.number'"
        )
    return segment


def _to_mask(value: Any) -> str:
    return MASK


def replaced(value: Any, keys: tuple[str, ...], replace: Callable[[Any], Any]) -> Any:
    """A copy of ``value`` with each value that the path ``keys`` reaches replaced by
    ``replace(it)`` (the rules of the module's docstring)."""
    if not keys:
        return replace(value)
    if isinstance(value, list):
        return [replaced(item, keys, replace) for item in value]
    if isinstance(value, dict):
        key, rest = keys[0], keys[1:]
        return {
            name: replaced(item, rest, replace) if key in (ALL_KEYS, name) else item
            for name, item in value.items()
        }
    return value


def reached(value: Any, keys: tuple[str, ...]) -> Iterator[Any]:
    """The values that the path ``keys`` reaches in ``value`` (what :func:`replaced`
    replaces)."""
    if not keys:
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from reached(item, keys)
    elif isinstance(value, dict):
        key, rest = keys[0], keys[1:]
        for name, item in value.items():
            if key in (ALL_KEYS, name):
                yield from reached(item, rest)


def _texts(values: Iterable[Any]) -> Iterator[str]:
    """Every scalar inside ``values`` as text (strings as they are, numbers as JSON)."""
    for value in values:
        if isinstance(value, dict):
            yield from _texts(value.values())
        elif isinstance(value, list):
            yield from _texts(value)
        elif isinstance(value, str):
            yield value
        elif isinstance(value, int | float) and not isinstance(value, bool):
            yield json.dumps(value)
