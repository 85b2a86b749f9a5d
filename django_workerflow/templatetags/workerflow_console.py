"""Template filters of the operations console: every time on its pages in one format, with
its zone (:func:`django_workerflow.console.time_words.format_when`).

``{% load workerflow_console %}``, then ``{{ step.created_at|wf_time }}`` ("14:03:05 UTC",
"Mar 19 14:03:05 UTC") and ``{{ step.created_at|wf_full_time }}`` for a ``title``
("2026-03-19 14:03:05.123 UTC"). Both take a datetime or an ISO 8601 string (the times
stored in JSON, such as an ``on_finish`` delivery's attempts) and show "" for None.
"""

from __future__ import annotations

from datetime import datetime

from django import template

from django_workerflow.console.time_words import clock_text, short_time

register = template.Library()


def _as_datetime(value: object) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            return None
    return None


@register.filter
def wf_time(value: object) -> str:
    """The console's short time with its zone; a string that is no time is shown as is."""
    when = _as_datetime(value)
    if when is None:
        return "" if value is None else str(value)
    return short_time(when)


@register.filter
def wf_full_time(value: object) -> str:
    """The full timestamp with milliseconds and zone, for hovering."""
    when = _as_datetime(value)
    if when is None:
        return "" if value is None else str(value)
    return clock_text(when)
