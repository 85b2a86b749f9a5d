"""A model field for JSON values kept as text."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

from django.db import models

from django_workerflow.values import jsonvalue

if TYPE_CHECKING:  # TextField is generic for type checkers only
    TextFieldBase: TypeAlias = models.TextField[Any, Any]
else:
    TextFieldBase = models.TextField


class JSONTextField(TextFieldBase):
    """JSON kept as text, so values read back exactly as written (``jsonb`` reorders keys)."""

    # django-stubs types a TextField's value as str; this one holds any JSON value.
    _pyi_private_set_type: Any
    _pyi_private_get_type: Any

    def from_db_value(self, value: str | None, expression: Any, connection: Any) -> Any:
        return jsonvalue.loads(value)

    def get_prep_value(self, value: Any) -> str | None:
        if value is None:
            return None
        return jsonvalue.dumps(value, what=f"Field {self.name!r}")

    def value_to_string(self, obj: models.Model) -> str:
        return self.get_prep_value(self.value_from_object(obj)) or ""

    def deconstruct(self) -> Any:
        # Migrations name the field by its public path, wherever it is defined.
        name, _path, args, kwargs = super().deconstruct()
        return name, "django_workerflow.models.JSONTextField", args, kwargs
