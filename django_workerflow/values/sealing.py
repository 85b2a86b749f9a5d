"""Sensitive values sealed at rest: encoded by a codec before they reach the database, and
opened again before the workflow's code, its replays, the harness or a reader sees them.

With ``WORKERFLOW_PAYLOAD_CODEC`` set, each value a definition's ``sensitive`` path reaches
(:mod:`django_workerflow.values.masking`) is stored as one string, :data:`MARKER` followed by
the codec's encoding of the value's JSON text; the rest of the value is stored as it is, so
its shape (and any other field) stays readable. Without the setting nothing is sealed, and a
value is never opened twice: opening walks a value only when a codec is set.

A codec is a class built with no argument whose ``encode(text)`` and ``decode(text)`` map
text to text; :class:`~django_workerflow.values.fernet.FernetCodec` is the built-in one.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from django.utils.module_loading import import_string

from django_workerflow.conf import settings
from django_workerflow.exceptions import WorkflowStateError
from django_workerflow.values import jsonvalue
from django_workerflow.values.masking import Section, SensitivePath, replaced

#: What a sealed value's stored string starts with.
MARKER = "wf-sealed:"


class Codec(Protocol):
    """Encodes a sensitive value's JSON text for storage, and decodes it back."""

    def encode(self, text: str) -> str: ...

    def decode(self, text: str) -> str: ...


def codec() -> Codec | None:
    """The codec ``WORKERFLOW_PAYLOAD_CODEC`` names (None: unset). Built once per setting
    and key list, so ``override_settings`` takes effect at once."""
    path = settings.PAYLOAD_CODEC
    if not path:
        return None
    return _built(path, tuple(settings.FERNET_KEYS))


@functools.lru_cache(maxsize=8)
def _built(path: str, keys: tuple[str, ...]) -> Codec:
    # ``keys`` is part of the cache key only: a codec reads its own settings when built.
    try:
        made: Codec = import_string(path)()
    except ImportError as exc:
        raise WorkflowStateError(
            f"WORKERFLOW_PAYLOAD_CODEC = {path!r} cannot be imported ({exc}). Name a codec "
            "class, e.g. 'django_workerflow.values.fernet.FernetCodec'."
        ) from exc
    return made


@dataclass(frozen=True, slots=True)
class Sealer:
    """Seals the sensitive values of one definition's instances (nothing without paths or
    without a codec)."""

    paths: tuple[SensitivePath, ...] = ()
    codec: Codec | None = None

    @classmethod
    def of(cls, paths: Iterable[SensitivePath]) -> Sealer:
        """The sealer of ``paths`` with the configured codec."""
        found = codec()
        return cls(tuple(paths), found) if found is not None else cls()

    @property
    def active(self) -> bool:
        return bool(self.paths) and self.codec is not None

    def input(self, value: Any) -> Any:
        return self._seal(Section.INPUT, "", value)

    def result(self, value: Any) -> Any:
        return self._seal(Section.RESULT, "", value)

    def event(self, event_name: str, payload: Any) -> Any:
        return self._seal(Section.EVENTS, event_name, payload)

    def step(self, step_id: str, value: Any) -> Any:
        return self._seal(Section.STEPS, step_id, value)

    def _seal(self, section: Section, name: str, value: Any) -> Any:
        if self.codec is None:
            return value
        for path in self.paths:
            if path.names(section, name):
                value = replaced(value, path.keys, self._sealed)
        return value

    def _sealed(self, value: Any) -> Any:
        if isinstance(value, str) and value.startswith(MARKER):
            return value  # sealed already (a copy of a sealed value)
        assert self.codec is not None  # _seal returns before
        text = jsonvalue.dumps(value, what="A sensitive value")
        return MARKER + self.codec.encode(text)


def open_value(value: Any) -> Any:
    """``value`` with every sealed value in it opened (``value`` itself without a codec).

    Raises :class:`WorkflowStateError` for a sealed value the codec cannot open (a key
    removed too early)."""
    found = codec()
    if found is None:
        return value
    return _opened(value, found)


def _opened(value: Any, found: Codec) -> Any:
    if isinstance(value, str):
        if not value.startswith(MARKER):
            return value
        try:
            return json.loads(found.decode(value[len(MARKER) :]))
        except ValueError as exc:
            raise WorkflowStateError(
                f"A sealed value cannot be opened ({type(exc).__name__}): was the key it was "
                "sealed with removed? Keep every old key in WORKERFLOW_FERNET_KEYS (after the "
                "new one) until `manage.py workerflow reseal` has run."
            ) from exc
    if isinstance(value, list):
        return [_opened(item, found) for item in value]
    if isinstance(value, dict):
        return {key: _opened(item, found) for key, item in value.items()}
    return value


def reseal(value: Any) -> Any:
    """``value`` with each sealed value opened and sealed again with the newest key."""
    found = codec()
    if found is None:
        return value
    return _resealed(value, found)


def _resealed(value: Any, found: Codec) -> Any:
    if isinstance(value, str) and value.startswith(MARKER):
        return MARKER + found.encode(found.decode(value[len(MARKER) :]))
    if isinstance(value, list):
        return [_resealed(item, found) for item in value]
    if isinstance(value, dict):
        return {key: _resealed(item, found) for key, item in value.items()}
    return value
