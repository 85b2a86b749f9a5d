"""The console's words for time: one format for a moment ("14:03:05 UTC", "Mar 19
14:03:05 CET (in 5 min)"), one for a duration ("5 min 3 s"), and the zone's name."""

from __future__ import annotations

from datetime import datetime, timedelta, tzinfo

from django.utils import timezone

from django_workerflow.values.clock import now as clock_now


def format_when(
    when: datetime | None,
    now: datetime,
    *,
    relative: bool = True,
    zone: bool = True,
    tz: tzinfo | None = None,
) -> str:
    """The console's one time format: the local time to the second, with the date when it
    is not ``now``'s day and the year when not its year, then the zone: "14:03:05 UTC",
    "Mar 19 14:03:05 CET", "2027-03-19 14:03:05 CET"; with ``relative``, "(in 5 min)" or
    "(2 h ago)" after it. ``zone=False`` where a column header says the zone; ``tz`` for a
    time in another zone than the current one (a schedule's own)."""
    if when is None:
        return ""
    local = timezone.localtime(when, tz)
    local_now = timezone.localtime(now, tz)
    if local.date() == local_now.date():
        text = local.strftime("%H:%M:%S")
    elif local.year == local_now.year:
        text = local.strftime("%b %d %H:%M:%S")
    else:
        text = local.strftime("%Y-%m-%d %H:%M:%S")
    if zone:
        text += f" {zone_name(local)}"
    if relative:
        text += f" ({relative_time(when, now)})"
    return text


def zone_name(when: datetime | None = None) -> str:
    """The zone's abbreviation at ``when`` ("UTC", "CET", "CEST"), or the current zone's
    name when there is no time to ask."""
    if when is not None:
        return timezone.localtime(when, when.tzinfo).tzname() or str(when.tzinfo)
    return timezone.localtime(clock_now()).tzname() or timezone.get_current_timezone_name()


def relative_time(when: datetime, now: datetime) -> str:
    """ "in 5 min", "2 h ago" or "now"."""
    delta = when - now
    if abs(delta) < timedelta(milliseconds=500):
        return "now"
    if delta > timedelta(0):
        return f"in {format_duration(delta)}"
    return f"{format_duration(-delta)} ago"


def format_duration(delta: timedelta) -> str:
    """A duration in the two largest units that matter: "250 ms", "1.5 s", "5 min 3 s",
    "2 h 5 min", "3 d 4 h"."""
    seconds = delta.total_seconds()
    if seconds < 1:
        return f"{round(seconds * 1000)} ms"
    if seconds < 10:
        return f"{seconds:.1f}".rstrip("0").rstrip(".") + " s"
    if seconds < 60:
        return f"{int(seconds)} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def short_time(when: datetime | None, *, zone: bool = True) -> str:
    """:func:`format_when` at the clock's now, without the relative words."""
    return format_when(when, clock_now(), relative=False, zone=zone)


def clock_text(when: datetime | None) -> str:
    """The full form, for hovering and the command line: the date always, milliseconds when
    there are any, and the zone: "2026-12-01 14:03:05.123 UTC"."""
    if when is None:
        return ""
    local = timezone.localtime(when)
    text = local.strftime("%Y-%m-%d %H:%M:%S")
    if local.microsecond:
        text += f".{local.microsecond // 1000:03d}"
    return f"{text} {zone_name(local)}"
