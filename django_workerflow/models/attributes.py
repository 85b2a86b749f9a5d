"""The instance's attributes column: a JSON field whose key lookups an index serves.

``WorkflowInstance.objects.filter(attributes__customer="c-42")`` is Django's key lookup.
On PostgreSQL Django compiles it to ``(attributes -> 'customer') = '"c-42"'::jsonb``, which
no index serves; this field compiles it to containment instead,
``attributes @> '{"customer": "c-42"}'::jsonb``, which the GIN ``jsonb_path_ops`` index of
migration 0024 serves. For the values attributes hold (a string, a number or a boolean) the
two are the same test: a key's value contained in an object is that value.

On SQLite the lookup stays Django's (``json_extract``, with ``json_type`` telling
``true`` from 1), which compares types as containment does: ``True`` matches a boolean and
``1`` a number (or ``1.0``) on both databases. A missing key is false there too, not NULL,
so ``exclude(attributes__customer=...)`` keeps the instances without the key on both (Django's
own lookup drops them on SQLite).

Anything else (a nested key, an expression on the right, a list or an object) compiles as
Django's own lookup does.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, TypeAlias

from django.db import models
from django.db.models.fields.json import KeyTransform, KeyTransformExact

if TYPE_CHECKING:  # the field is generic for type checkers only
    JSONFieldBase: TypeAlias = models.JSONField[Any, Any]
else:
    JSONFieldBase = models.JSONField

#: The name of the PostgreSQL index serving attribute lookups (migration 0024).
INDEX_NAME = "workerflow_attributes"

_SCALARS = (str, int, float, bool)


class AttributeKey(KeyTransform):
    """``attributes__<name>``: a key of the attributes, whose exact lookup an index serves."""


class AttributeKeyExact(KeyTransformExact):
    """``attributes__<name>=value``: containment on PostgreSQL, Django's lookup (a missing key
    false, not NULL) on SQLite."""

    def _served(self) -> bool:
        """A top-level key compared with a plain value: the case this lookup rewrites."""
        return (
            isinstance(self.lhs, AttributeKey)
            and not isinstance(self.lhs.lhs, KeyTransform)
            and isinstance(self.rhs, _SCALARS)
        )

    def as_postgresql(self, compiler: Any, connection: Any) -> tuple[str, Any]:
        if not self._served():
            return super().as_sql(compiler, connection)
        column, params = compiler.compile(self.lhs.lhs)
        document = json.dumps({self.lhs.key_name: self.rhs})
        return f"{column} @> %s::jsonb", (*params, document)

    def as_sqlite(self, compiler: Any, connection: Any) -> tuple[str, Any]:
        sql, params = super().as_sql(compiler, connection)
        if not self._served():
            return sql, params
        # A missing key compares as NULL here, where containment says false: false too, so
        # that exclude() keeps an instance without the key on both databases.
        return f"COALESCE(({sql}), 0)", params


AttributeKey.register_lookup(AttributeKeyExact)


class _AttributeKeyFactory:
    def __init__(self, key_name: str) -> None:
        self.key_name = key_name

    def __call__(self, *args: Any, **kwargs: Any) -> AttributeKey:
        return AttributeKey(self.key_name, *args, **kwargs)


class AttributesField(JSONFieldBase):
    """A JSON object of an instance's attributes (NULL: none), queried by key."""

    def get_transform(self, name: str) -> Any:
        transform = super().get_transform(name)
        if isinstance(transform, type):  # a registered transform, not a key
            return transform
        return _AttributeKeyFactory(name)
