"""The schedule, flow-control and step settings of a definition, checked when it is declared."""

from __future__ import annotations

import zoneinfo
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from croniter import CroniterBadDateError, croniter

from django_workerflow.engine.step_timer import timeout_problem

if TYPE_CHECKING:
    from django_workerflow.definition.workflow import WorkflowDefinition

#: Five fields (minute hour day month weekday), or six with seconds first (second minute
#: hour day month weekday, as Quartz and Spring read six fields).
CRON_FIELD_COUNTS = (5, 6)


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
    if cls.step_timeout is not None and (problem := timeout_problem(cls.step_timeout)):
        found.append(f"`step_timeout` = {cls.step_timeout!r} {problem}")
    return found


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
