"""Which run steps a dead worker's tick was running: judged when its lease is taken over.

A tick runs one callback at a time, so when its worker dies exactly one chain of nested run
steps is executing, and only the innermost one was running its own code: that attempt was
interrupted. Every other step left 'running' was suspended by a child step, and goes on with
the same attempt.

What the recorded steps tell, for a 'running' run step:

- a child still pending, running or waiting: it was suspended by that child;
- otherwise, when every child was settled by a tick (a run child succeeded or failed, a sleep
  elapsed, a wait timed out) or it has none: it was certainly running its own code, because
  nothing but a tick settles those;
- otherwise a child wait was satisfied by an event, which may have arrived after the worker
  died, while the step was suspended on it. Such a step counts as interrupted only when no
  step was certainly running: the crash was in one chain, not in two.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django_workerflow.store.records import UNSETTLED_STATES
from django_workerflow.values.states import StepState, StepType

if TYPE_CHECKING:
    from django_workerflow.store.records import StepRecord


def interrupted_run_steps(steps: dict[str, StepRecord]) -> set[str]:
    """The step ids of the run steps whose attempt the dead worker's tick interrupted."""
    children: dict[int, list[StepRecord]] = {}
    for record in steps.values():
        if record.parent_pk is not None:
            children.setdefault(record.parent_pk, []).append(record)
    certain: set[str] = set()
    uncertain: set[str] = set()
    for record in steps.values():
        if record.type != StepType.RUN or record.state != StepState.RUNNING:
            continue
        own = children.get(record.pk, [])
        if any(child.state in UNSETTLED_STATES for child in own):
            continue
        if any(child.state == StepState.SATISFIED for child in own):
            uncertain.add(record.step_id)
        else:
            certain.add(record.step_id)
    return certain or uncertain
