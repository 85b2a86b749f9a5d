"""The benchmark's workload written for DBOS Transact (imported only when DBOS is installed):
a workflow of N trivial sequential steps, like ``bench-steps``."""

from __future__ import annotations

from dbos import DBOS


@DBOS.step()
def trivial(index: int) -> int:
    return index


@DBOS.workflow()
def sequential(steps: int) -> int:
    for index in range(steps):
        trivial(index)
    return steps
