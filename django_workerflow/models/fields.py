"""The engine's own model fields: JSON kept as text, and datetimes that are aware UTC."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeAlias

from django.conf import settings
from django.db import models
from django.utils import timezone

from django_workerflow.values import jsonvalue

if TYPE_CHECKING:  # the fields are generic for type checkers only
    TextFieldBase: TypeAlias = models.TextField[Any, Any]
    DateTimeFieldBase: TypeAlias = models.DateTimeField[Any, Any]
else:
    TextFieldBase = models.TextField
    DateTimeFieldBase = models.DateTimeField


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


def engine_datetime(value: datetime | None, connection: Any) -> Any:
    """An aware datetime of the engine as ``connection``'s driver takes it for an engine
    column, whatever ``USE_TZ`` says (raw statements' parameters; the fields use it too).

    With ``USE_TZ`` Django converts it. Without, Django refuses an aware value on SQLite
    and would read one back naive in ``TIME_ZONE`` on PostgreSQL: the value is written in
    UTC (naive on a database without time zones), which :class:`EngineDateTimeField`
    reads back."""
    if value is not None and not settings.USE_TZ and timezone.is_aware(value):
        value = value.astimezone(UTC)
        if not connection.features.supports_timezones:
            value = value.replace(tzinfo=None)
    return connection.ops.adapt_datetimefield_value(value)


def engine_aware(value: datetime, connection: Any) -> datetime:
    """A datetime read from an engine column, aware in UTC whatever ``USE_TZ`` says: without
    it, PostgreSQL returns naive times in ``TIME_ZONE`` and SQLite the naive UTC written by
    :func:`engine_datetime`."""
    if timezone.is_naive(value):
        zone = timezone.get_default_timezone() if connection.features.supports_timezones else UTC
        value = timezone.make_aware(value, zone)
    return value.astimezone(UTC)


class UTCDateTimeField(DateTimeFieldBase):
    """A datetime column of the engine: its values are aware and in UTC whatever ``USE_TZ``
    says, as the engine's clock is. With ``USE_TZ`` (Django's default) it is exactly
    Django's ``DateTimeField``; the column and its migrations are that field's."""

    def get_db_prep_value(self, value: Any, connection: Any, prepared: bool = False) -> Any:
        if settings.USE_TZ or not isinstance(value, datetime):
            return super().get_db_prep_value(value, connection, prepared)
        return engine_datetime(value if prepared else self.get_prep_value(value), connection)

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        # Always a converter (not only without USE_TZ): readers cache a field's converters.
        if settings.USE_TZ or not isinstance(value, datetime):
            return value
        return engine_aware(value, connection)

    def deconstruct(self) -> Any:
        # The column is a DateTimeField's: migrations name that field, so none is needed.
        name, _path, args, kwargs = super().deconstruct()
        return name, "django.db.models.DateTimeField", args, kwargs


if TYPE_CHECKING:
    # Typed as Django's field, whose values it holds: django-stubs' plugin types the model
    # attributes (optional when null=True) from the field classes it knows.
    EngineDateTimeField: TypeAlias = models.DateTimeField
else:
    EngineDateTimeField = UTCDateTimeField
