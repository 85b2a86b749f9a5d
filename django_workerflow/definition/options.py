"""The schedule, flow-control, debounce and timeout settings of a definition, checked when
it is declared."""

from __future__ import annotations

import math
import zoneinfo
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from croniter import CroniterBadDateError, croniter

from django_workerflow.engine.step_timer import timeout_problem
from django_workerflow.exceptions import WorkflowInputError
from django_workerflow.values import attributes, jsonvalue, masking

if TYPE_CHECKING:
    from django_workerflow.definition.workflow import WorkflowDefinition

#: Five fields (minute hour day month weekday), or six with seconds first (second minute
#: hour day month weekday, as Quartz and Spring read six fields).
CRON_FIELD_COUNTS = (5, 6)
#: The longest debounce or max_debounce accepted (a burst, not a schedule).
MAX_DEBOUNCE_SECONDS = 30 * 86400


def cron(expression: str, start: datetime) -> croniter:
    """A walk over the occurrences of ``expression`` from ``start``: the one reading of a
    cron string, for the class check and the schedules alike. croniter reads six fields with
    seconds last unless told otherwise; we read them seconds first."""
    return croniter(expression, start, second_at_beginning=True)


def cron_problem(expression: object) -> str | None:
    """Why ``expression`` is not a cron string we accept (None: it is fine)."""
    if not isinstance(expression, str):
        return f"is a {type(expression).__name__}, not a cron string such as '0 3 * * *'"
    fields = expression.split()
    if len(fields) not in CRON_FIELD_COUNTS:
        return (
            f"has {len(fields)} fields; write five (minute hour day month weekday), e.g. "
            "'0 3 * * *', or six with seconds first, e.g. '*/10 * * * * *'"
        )
    if not croniter.is_valid(expression, second_at_beginning=True):
        return "is not a valid cron expression; e.g. '0 3 * * *' runs at 03:00 every day"
    try:
        cron(expression, datetime.now(UTC)).get_next(datetime)
    except CroniterBadDateError:
        return (
            "matches no date (such as the 31st of a 30-day month), so it would never start "
            "an instance; fix the day and month fields"
        )
    return None


def timezone_problem(name: object) -> str | None:
    """Why ``name`` is not an IANA time zone (None: it is one)."""
    if not isinstance(name, str) or not name:
        return "must be an IANA time zone name such as 'Europe/Paris'"
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return "is not a known IANA time zone name such as 'Europe/Paris'"
    return None


def problems(cls: type[WorkflowDefinition]) -> list[str]:
    """Every problem with the schedule, flow-control and step settings of ``cls``."""
    found = []
    if cls.schedule is not None and (problem := cron_problem(cls.schedule)):
        found.append(f"`schedule` = {cls.schedule!r} {problem}")
    if cls.schedule_timezone is not None and (problem := timezone_problem(cls.schedule_timezone)):
        found.append(f"`schedule_timezone` = {cls.schedule_timezone!r} {problem}")
    if not isinstance(cls.schedule_catch_up, bool):
        found.append("`schedule_catch_up` must be True or False")
    limit = cls.max_concurrency
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        found.append(f"`max_concurrency` = {limit!r} must be a positive integer (or None)")
    if cls.rate_limit is not None and not _valid_rate(cls.rate_limit):
        found.append(
            f"`rate_limit` = {cls.rate_limit!r} must be (count, period): a positive integer "
            "and a positive timedelta, e.g. (10, timedelta(seconds=1))"
        )
    found.extend(debounce_problems(cls.debounce, cls.max_debounce, what="`{}`"))
    if cls.debounce is not None and (cls.max_concurrency is not None or cls.rate_limit is not None):
        found.append(
            "`debounce` cannot be combined with `max_concurrency` or `rate_limit` (a queued "
            "instance's first tick belongs to admission); drop one of them"
        )
    if cls.step_timeout is not None and (problem := timeout_problem(cls.step_timeout)):
        found.append(f"`step_timeout` = {cls.step_timeout!r} {problem}")
    if cls.timeout is not None and (problem := instance_timeout_problem(cls.timeout)):
        found.append(f"`timeout` = {cls.timeout!r} {problem}")
    if (problem := attribute_filters_problem(cls.attribute_filters)) is not None:
        found.append(f"`attribute_filters` = {cls.attribute_filters!r} {problem}")
    found.extend(masking.problems(cls.sensitive))
    return found


def attribute_filters_problem(value: object) -> str | None:
    """Why ``value`` is not a list of attribute names to filter the admin by (None: it is)."""
    if isinstance(value, str) or not isinstance(value, list | tuple):
        return "must be a list of attribute names, e.g. ['customer', 'region']"
    for name in value:
        try:
            attributes.check_name(name, what="the name")
        except WorkflowInputError as exc:
            return f"names an attribute that cannot exist: {exc}"
    if len(set(value)) != len(value):
        return "names an attribute twice"
    return None


def instance_timeout_problem(value: object) -> str | None:
    """Why ``value`` is not an instance timeout (None: it is one): a positive, finite number
    of seconds or a positive timedelta, as a step timeout, and no longer than the durations
    of steps may be (``WORKERFLOW_MAX_DURATION_DAYS``)."""
    problem = timeout_problem(value)
    if problem is not None:
        return problem
    try:
        jsonvalue.to_timedelta(value, what="it")
    except WorkflowInputError as exc:
        return f"is too long: {str(exc).removeprefix('it of ').rstrip('.')}"
    return None


def instance_timeout_seconds(value: float | timedelta) -> float:
    """An instance timeout checked by :func:`instance_timeout_problem`, in seconds."""
    return as_timedelta(value).total_seconds()


def debounce_problems(debounce: object, max_debounce: object, *, what: str) -> list[str]:
    """Every problem with a ``debounce`` and ``max_debounce`` pair (seconds or timedeltas;
    None: unset), each name formatted into ``what`` ("`{}`" on a class, "{}=" at a start)."""
    found = []
    for name, value in (("debounce", debounce), ("max_debounce", max_debounce)):
        if value is not None and (problem := _duration_problem(value)):
            found.append(f"{what.format(name)} {value!r} {problem}")
    if max_debounce is not None and debounce is None:
        found.append(
            f"{what.format('max_debounce')} bounds a debounce: set {what.format('debounce')} too"
        )
    elif (
        not found
        and isinstance(debounce, int | float | timedelta)
        and isinstance(max_debounce, int | float | timedelta)
        and as_timedelta(max_debounce) < as_timedelta(debounce)
    ):
        found.append(
            f"{what.format('max_debounce')} {max_debounce!r} is shorter than "
            f"{what.format('debounce')} {debounce!r}; make it at least as long"
        )
    return found


def as_timedelta(value: float | timedelta) -> timedelta:
    """A duration checked by :func:`debounce_problems`, as a timedelta."""
    return value if isinstance(value, timedelta) else timedelta(seconds=value)


def _duration_problem(value: object) -> str | None:
    """Why ``value`` is not a positive duration (None: it is one)."""
    if isinstance(value, bool) or not isinstance(value, int | float | timedelta):
        return f"must be a number of seconds or a timedelta, not {type(value).__name__}"
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if not math.isfinite(seconds) or seconds <= 0:
        return "must be a positive, finite duration"
    if seconds > MAX_DEBOUNCE_SECONDS:
        return "must be at most 30 days"
    return None


def _valid_rate(rate: object) -> bool:
    if not isinstance(rate, tuple) or len(rate) != 2:
        return False
    count, period = rate
    return (
        isinstance(count, int)
        and not isinstance(count, bool)
        and count >= 1
        and isinstance(period, timedelta)
        and period > timedelta(0)
    )
