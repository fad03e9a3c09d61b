"""A schedule's spec as the cron it was created from. The server keeps cron expressions as
calendars; the CLI's `schedules list` and the console's Schedules page show the schedule as it
is on the server (the worker's settings made it), not as this process's settings would."""

from __future__ import annotations

from collections.abc import Sequence

from temporalio.client import ScheduleCalendarSpec, ScheduleRange, ScheduleSpec

# Field order and full range of each calendar field, as cron writes them.
_FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day_of_month", 1, 31), ("month", 1, 12))


def _ranges(ranges: Sequence[ScheduleRange], low: int, high: int) -> str:
    parts = []
    for r in ranges:
        end = max(r.end, r.start)
        step = f"/{r.step}" if r.step > 1 else ""
        if r.start == low and end == high:
            parts.append(f"*{step}")
        elif r.start == end:
            parts.append(str(r.start))
        else:
            parts.append(f"{r.start}-{end}{step}")
    return ",".join(parts) or "*"


def calendar_cron(calendar: ScheduleCalendarSpec) -> str:
    fields = [_ranges(getattr(calendar, name), low, high) for name, low, high in _FIELDS]
    fields.append(_ranges(calendar.day_of_week, 0, 6))
    return " ".join(fields)


def spec_text(spec: ScheduleSpec) -> str:
    """The spec's cron expressions, each calendar written as the cron it came from."""
    return ", ".join([*spec.cron_expressions, *(calendar_cron(c) for c in spec.calendars)])


def period_minutes(cron: str) -> int:
    """About how often a cron fires, in minutes, read from its minute and hour fields: `*/N`
    minutes every N, `*` every one, fixed minutes each hour, `*/H` hours every H hours, and
    anything else once a day; with its day or month fields restricted, a week (weekdays), a
    month (days of the month) or a year (months). Never shorter than the real gap, so a wait
    of a few periods is a missed run, not a slow one."""
    fields = cron.split()
    if len(fields) < 5:
        return 366 * 24 * 60
    day, month, weekday = fields[2:5]
    for field, days in ((month, 366), (day, 31), (weekday, 7)):
        if field != "*":
            return days * 24 * 60
    minute, hour = fields[0], fields[1]
    if hour == "*":
        if minute == "*":
            return 1
        if minute.startswith("*/") and minute[2:].isdigit():
            return max(1, int(minute[2:]))
        return 60
    if hour.startswith("*/") and hour[2:].isdigit():
        return max(1, int(hour[2:])) * 60
    return 24 * 60
