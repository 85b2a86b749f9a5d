"""Scenario ``timeouts``: what step timeouts cost a run step that sets none, and one that does.

Sequential trivial run steps (the sequential scenario's), one instance of ``timeout_steps``
steps per variant in each of ``timeout_rounds`` rounds. The variants run interleaved, their
order turned each round, so that they share the machine's load:

- ``no_timeout``: steps that set no timeout, on the code as it is;
- ``timer_disabled``: the same steps with the engine's timer hook
  (``step_timer.run_limited``) replaced, in this process, by a direct call of the callback:
  the code as if the timer did not exist. A step without a timeout does not reach the hook
  today, so this variant runs what ``no_timeout`` runs: the two differ by no more than the
  machine's noise unless a change makes untimed steps go through the timer;
- ``timeout_60``: steps with a 60 s ``step_timeout``, each attempt arming and disarming
  the ``SIGALRM`` timer (this process's main thread, as in a django-q2 worker).

Reported per variant: ms per step over the rounds (the median, and the quartiles as the
run-to-run spread), and per round the ratio of ``no_timeout`` to ``timer_disabled`` and the
difference of ``timeout_60`` from ``no_timeout``, summarised the same way.
"""

from __future__ import annotations

import statistics
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

from django_workerflow import start
from django_workerflow.engine import step_timer
from django_workerflow.workers import bells

from .common import Sizes, Stopwatch
from .inline import drive


@contextmanager
def timer_disabled() -> Iterator[None]:
    """The engine's timer hook calls the callback directly: no timer, no time check."""

    def direct(fn: Callable[[], Any], *, step_id: str, seconds: float) -> Any:
        return fn()

    with mock.patch.object(step_timer, "run_limited", direct):
        yield


@dataclass(frozen=True)
class Variant:
    """One way of running the same steps: its definition, start options and patches."""

    name: str
    definition: str
    start_options: dict[str, Any] = field(default_factory=dict)
    patched: Callable[[], AbstractContextManager[Any]] = nullcontext


#: The variants measured side by side. An instance-level timeout is one more entry:
#: ``Variant("instance_timeout", "bench-steps", {"timeout": 3600})``, with its row in
#: bench/targets.py (a step without a timeout).
VARIANTS = (
    Variant("no_timeout", "bench-steps"),
    Variant("timer_disabled", "bench-steps", patched=timer_disabled),
    Variant("timeout_60", "bench-steps-timeout"),
)


def run_variant(variant: Variant, steps: int) -> float:
    """Seconds per step of one instance of ``steps`` run steps, start excluded."""
    with bells.suppressed():
        instance = start(
            variant.definition,
            key=f"{variant.name}-{uuid.uuid4()}",
            input={"steps": steps},
            **variant.start_options,
        )
    with variant.patched(), Stopwatch() as watch:
        outcome = drive(instance.pk)
    if outcome != "completed":
        raise RuntimeError(f"The {variant.name} instance ended {outcome!r}.")
    return watch.seconds / steps


def step_timeouts(sizes: Sizes) -> dict[str, Any]:
    steps, rounds = sizes.timeout_steps, sizes.timeout_rounds
    for variant in VARIANTS:  # warm up: imports, prepared statements
        run_variant(variant, 20)
    per_step: dict[str, list[float]] = {variant.name: [] for variant in VARIANTS}
    for round_ in range(rounds):
        turn = round_ % len(VARIANTS)
        for variant in VARIANTS[turn:] + VARIANTS[:turn]:
            per_step[variant.name].append(run_variant(variant, steps))
    untimed, disabled, timed = (
        per_step["no_timeout"],
        per_step["timer_disabled"],
        per_step["timeout_60"],
    )
    return {
        "steps": steps,
        "rounds": rounds,
        "ms_per_step": {name: _summary(values, 1000) for name, values in per_step.items()},
        "untimed_to_disabled": _summary([a / b for a, b in zip(untimed, disabled, strict=True)]),
        "timer_us_per_step": _summary(
            [t - a for t, a in zip(timed, untimed, strict=True)], 1_000_000
        ),
    }


def _summary(values: list[float], scale: float = 1) -> dict[str, float]:
    """The median and the quartiles (p25, p75) of ``values``, times ``scale``."""
    p25, median, p75 = statistics.quantiles(values, n=4, method="inclusive")
    return {"median": median * scale, "p25": p25 * scale, "p75": p75 * scale}
