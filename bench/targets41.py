"""The target of issue 41 (a step timeout costs nothing measurable on a step that sets none),
printed PASS or MISS, with the figures of scenario 41 (bench/step_timeouts.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .report import Results, Table, check, dig

#: A step without a timeout, within this fraction of the code without the timer when it
#: falls outside the latter's run-to-run spread (its quartiles over the rounds).
UNTIMED_TOLERANCE = 0.03


def ms_per_step(variant: str) -> Callable[[dict[str, Any]], str]:
    def cell(r: dict[str, Any]) -> str:
        figures = dig(r, "timeouts", "ms_per_step", variant)
        return f"{figures['median']:.3f} ms ({figures['p25']:.3f}-{figures['p75']:.3f})"

    return cell


def untimed_costs_nothing(r: dict[str, Any]) -> str:
    """PASS: the median ms/step of steps without a timeout lies within the quartiles of the
    rounds without the timer, or within 3 % of their median."""
    untimed = dig(r, "timeouts", "ms_per_step", "no_timeout")["median"]
    disabled = dig(r, "timeouts", "ms_per_step", "timer_disabled")
    ratio = untimed / disabled["median"]
    within = disabled["p25"] <= untimed <= disabled["p75"]
    return check(
        f"{untimed:.3f} / {disabled['median']:.3f} ms = x{ratio:.3f}",
        within or abs(ratio - 1) <= UNTIMED_TOLERANCE,
    )


def paired_ratio(r: dict[str, Any]) -> str:
    figures = dig(r, "timeouts", "untimed_to_disabled")
    return f"x{figures['median']:.3f} (x{figures['p25']:.3f}-x{figures['p75']:.3f})"


def timer_cost(r: dict[str, Any]) -> str:
    figures = dig(r, "timeouts", "timer_us_per_step")
    return f"{figures['median']:+.1f} µs ({figures['p25']:+.1f} to {figures['p75']:+.1f})"


def targets_table(results: Results) -> Table:
    table = Table(results)
    table.header("Targets (issue 41)")
    table.section("  ms per step, median (quartiles) of the rounds:")
    table.row("steps without a timeout", ms_per_step("no_timeout"), "timeouts")
    table.row("the same, the timer hook disabled", ms_per_step("timer_disabled"), "timeouts")
    table.row("steps with timeout=60", ms_per_step("timeout_60"), "timeouts")
    table.row("without a timeout / timer disabled, per round", paired_ratio, "timeouts")
    table.row("timeout=60 - without, per round and step", timer_cost, "timeouts")
    table.row(
        "a step without a timeout: within the spread (or 3 %) of the code without the timer",
        untimed_costs_nothing,
        "timeouts",
    )
    return table
