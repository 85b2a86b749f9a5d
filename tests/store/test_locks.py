"""One module takes instance-row locks (issue 36, item 5): read from the package's source.

Every ``select_for_update`` of instance rows, every multi-row ``UPDATE`` of them and every
admission gate is taken through :mod:`django_workerflow.store.locks`, whose docstring is
the lock order; anywhere else, the order could not be read off in one place.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "django_workerflow"
LOCKS = PACKAGE / "store" / "locks.py"
#: The rows other than instance rows that the package locks elsewhere, each in its own
#: short transaction: named in the statement that locks them.
OTHER_ROWS = (
    "WorkflowSchedule",
    "FinishDelivery",
    "ProcessMetrics",
    "WorkerHeartbeat",
    "quiet_rows",
)
#: What a lock or a multi-row write on instance rows or gates names.
INSTANCE_ROWS = ("WorkflowInstance", "AdmissionGate", "gate")


def _calls(source: str) -> list[tuple[int, str, str]]:
    """Each method call in ``source``: its line, the method, and its receiver's source."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            found.append((node.lineno, node.func.attr, ast.unparse(node.func.value)))
    return found


def offenders(source: str, where: str) -> list[str]:
    """The instance-row locks, multi-row instance updates and gates ``source`` takes."""
    sites = []
    for line, method, receiver in _calls(source):
        if method == "select_for_update" and not any(n in receiver for n in OTHER_ROWS):
            sites.append(f"{where}:{line}: {receiver}.select_for_update()")
        elif method == "update" and any(n in receiver for n in INSTANCE_ROWS):
            sites.append(f"{where}:{line}: {receiver}.update()")
        elif method == "admit" and "WorkflowInstance" in receiver:
            sites.append(f"{where}:{line}: {receiver}.admit() (a multi-row update)")
    return sites


def offending_sites() -> list[str]:
    sites = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path != LOCKS and "migrations" not in path.parts:
            sites += offenders(path.read_text(), str(path.relative_to(PACKAGE.parent)))
    return sites


def test_instance_rows__are_locked_and_updated_together_only_in_the_locks_module():
    sites = offending_sites()

    assert not sites, (
        "Lock instance rows, update several at once and take admission gates through "
        "django_workerflow/store/locks.py (its docstring is the lock order):\n" + "\n".join(sites)
    )


def test_the_scan__finds_what_it_looks_for():
    assert len(offenders(LOCKS.read_text(), "locks.py")) >= 8
    assert (
        offenders(
            "WorkflowSchedule.objects.select_for_update().get(pk=1)\n"
            "Step.objects.filter(pk=1).update(state='x')\n",
            "other.py",
        )
        == []
    )
