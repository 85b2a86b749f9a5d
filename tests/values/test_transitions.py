"""``values.transitions``: the instance's state machine is one table, the docs state the
same table, and no code writes a status (or the fields admission and the bells keep) but
through the named ways: an instance's transitions, its creation, the queryset's methods."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from django_workerflow.exceptions import InstanceTransitionError
from django_workerflow.values import transitions
from django_workerflow.values.states import WorkflowStatus

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "django_workerflow"
CONCEPTS = ROOT / "docs" / "concepts.md"
MARKER = "<!-- instance-transitions -->"

#: The fields of an instance that admission and the bells write on rows they do not load.
QUEUE_FIELDS = {"admitted_at", "alarm_at", "bell_at"}
#: Calls that write the fields given as keywords.
WRITING_CALLS = {"update", "create", "update_or_create", "get_or_create", "_update", "_write"}
#: A SQL assignment of the status column (``SET status =`` or ``, status =``).
SQL_SETS_STATUS = re.compile(r"(\bSET\b|,)\s*\"?status\"?\s*=", re.IGNORECASE)


def _documented() -> tuple[dict[str, set[str]], set[str]]:
    """The docs' table: the sources of each status, and the statuses one is created with."""
    text = CONCEPTS.read_text()
    lines = text[text.index(MARKER) + len(MARKER) :].strip().splitlines()
    sources: dict[str, set[str]] = {}
    created: set[str] = set()
    for line in lines[2:]:  # after the header and its rule
        if not line.startswith("|"):
            break
        target, source = (cell.strip() for cell in line.strip().strip("|").split("|")[:2])
        name = target.strip("`")
        sources[name] = set(re.findall(r"`(\w+)`", source))
        if "(created)" in source:
            created.add(name)
    return sources, created


def test_transitions__the_docs_state_the_code_s_table() -> None:
    sources, created = _documented()

    assert sources == {
        str(target): {str(source) for source in allowed}
        for target, allowed in transitions.SOURCES.items()
    }
    assert created == {transitions.CREATED}


def test_transitions__every_status_has_its_row_and_names_only_statuses() -> None:
    assert set(transitions.SOURCES) == set(WorkflowStatus)
    for allowed in transitions.SOURCES.values():
        assert allowed <= set(WorkflowStatus)


def test_check__refuses_a_move_the_table_does_not_allow_naming_the_key_and_both() -> None:
    with pytest.raises(InstanceTransitionError) as refused:
        transitions.check("order-7", WorkflowStatus.COMPLETED, WorkflowStatus.RUNNING)

    assert str(refused.value) == (
        "Instance 'order-7' cannot move from status 'completed' to 'running': an instance "
        "reaches 'running' only from 'pending', 'paused', 'failed' or 'cancelled' "
        "(docs/concepts.md#instance-statuses). Nothing was written; read the instance again "
        "and act on the status it has now."
    )


def test_check__lets_every_move_of_the_table_through() -> None:
    for target, allowed in transitions.SOURCES.items():
        for source in WorkflowStatus:
            assert transitions.allows(source, target) == (source in allowed)
            if source in allowed:
                transitions.check("order-7", source, target)


# No status write but through the table ---------------------------------------------------


#: Modules that name a ``status`` of something other than an instance row:
#: ``WorkflowFailedError.status`` is the status an awaited instance ended with.
NOT_ROWS = {"exceptions.py"}


def _modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        if "migrations" not in path.parts and str(path.relative_to(PACKAGE)) not in NOT_ROWS:
            yield str(path.relative_to(ROOT)), ast.parse(path.read_text(), filename=str(path))


def _is_created(node: ast.expr) -> bool:
    """``transitions.CREATED``: the status an instance is created with."""
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "CREATED"
        and isinstance(node.value, ast.Name)
        and node.value.id == "transitions"
    )


def _names_a_status(node: ast.expr) -> bool:
    """``WorkflowStatus.X`` or a status's literal value."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return node.value.id == "WorkflowStatus"
    return isinstance(node, ast.Constant) and node.value in WorkflowStatus.values


def _texts(node: ast.AST) -> Iterator[str]:
    """The literal text of a string or an f-string."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node.value
    elif isinstance(node, ast.JoinedStr):
        yield "".join(
            part.value if isinstance(part, ast.Constant) else "{}" for part in node.values
        )


def _call_writes(node: ast.Call) -> Iterator[str]:
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    for keyword in node.keywords:
        if keyword.arg == "status" and name in WRITING_CALLS and not _is_created(keyword.value):
            yield f"{name}(status=...)"
    attribute = node.args[1] if name == "setattr" and len(node.args) > 1 else None
    if isinstance(attribute, ast.Constant) and attribute.value == "status":
        yield 'setattr(..., "status", ...)'


def _assigned(node: ast.Assign | ast.AugAssign | ast.AnnAssign) -> Iterator[str]:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    for target in targets:
        if isinstance(target, ast.Attribute) and target.attr == "status":
            yield ".status = ..."


def _dict_writes(node: ast.Dict) -> Iterator[str]:
    for key, value in zip(node.keys, node.values, strict=True):
        if isinstance(key, ast.Constant) and key.value == "status" and _names_a_status(value):
            yield '{"status": <a status>}'


def _status_writes(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """Each place that writes a status without a transition (line, what)."""
    for node in ast.walk(tree):
        found: Iterator[str] = iter(())
        if isinstance(node, ast.Call):
            found = _call_writes(node)
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            found = _assigned(node)
        elif isinstance(node, ast.Dict):
            found = _dict_writes(node)
        for what in found:
            yield getattr(node, "lineno", 0), what
        for text in _texts(node):
            if SQL_SETS_STATUS.search(text):
                yield getattr(node, "lineno", 0), "SQL that sets the status"


#: The folded moves of the short-work tick (PostgreSQL): one statement claims a pending
#: instance (running, with its event) or completes a running one, and the model is told what
#: the statement wrote. Each is named here (module, top-level name) with the one move it
#: makes, which the table must allow; ``instance_rows`` checks it with ``transitions.check``.
FOLDED_MOVES = {
    ("django_workerflow/store/sql.py", "_CLAIM_INSTANCE"): (
        WorkflowStatus.PENDING,
        WorkflowStatus.RUNNING,
    ),
    ("django_workerflow/store/sql.py", "_COMPLETE_INSTANCE"): (
        WorkflowStatus.RUNNING,
        WorkflowStatus.COMPLETED,
    ),
    ("django_workerflow/store/instance_rows.py", "mark_claimed"): (
        WorkflowStatus.PENDING,
        WorkflowStatus.RUNNING,
    ),
}


def _top_level_name(node: ast.stmt) -> str | None:
    if isinstance(node, ast.FunctionDef | ast.ClassDef):
        return node.name
    if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id
    return None


def _unfolded_writes(path: str, tree: ast.Module) -> Iterator[tuple[int, str]]:
    """:func:`_status_writes` of ``tree`` but those of its :data:`FOLDED_MOVES`."""
    for node in tree.body:
        if (path, _top_level_name(node)) not in FOLDED_MOVES:
            yield from _status_writes(ast.Module(body=[node], type_ignores=[]))


def test_transitions__no_code_writes_a_status_but_through_the_table() -> None:
    """A status is written by ``WorkflowInstance._move`` (every transition that changes it)
    or as ``transitions.CREATED`` when an instance is created; nothing else names one in a
    write: no ``update(status=...)``, no ``instance.status = ...``, no ``SET status =``, but
    for the folded moves, each named with the move the table allows it."""
    found = [
        f"{path}:{line}: {what}"
        for path, tree in _modules()
        for line, what in _unfolded_writes(path, tree)
    ]

    assert found == []


def test_transitions__each_folded_move_is_one_the_table_allows_and_still_writes() -> None:
    trees = dict(_modules())
    for (path, name), (source, target) in FOLDED_MOVES.items():
        assert transitions.allows(source, target), (path, name)
        [node] = [n for n in trees[path].body if _top_level_name(n) == name]
        assert list(_status_writes(ast.Module(body=[node], type_ignores=[]))), (path, name)


def test_transitions__the_guard_sees_what_it_looks_for() -> None:
    """The check above is not vacuous: each kind of write it refuses is found."""
    tree = ast.parse(
        "WorkflowInstance.objects.filter(pk=1).update(status=WorkflowStatus.RUNNING)\n"
        "instance._update(status='paused')\n"
        "instance.status = 'failed'\n"
        "setattr(instance, 'status', 'failed')\n"
        "fields = {'status': WorkflowStatus.CANCELLED}\n"
        "SQL = f'UPDATE {INSTANCE} SET status = %s WHERE id = %s'\n"
        "SQL2 = 'UPDATE t SET alarm_at = NULL, status = %(s)s'\n"
        "WorkflowInstance.objects.create(key='k', status=transitions.CREATED)\n"
        "WorkflowInstance.objects.filter(status=WorkflowStatus.RUNNING).update(alarm_at=None)\n"
        "FENCE = 'WHERE id = %s AND status = %s'\n"
    )

    assert sorted({line for line, _ in _status_writes(tree)}) == [1, 2, 3, 4, 5, 6, 7]


def _queue_field_writes(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """Each ``update()`` of an instance's admission or bell fields outside the queryset's
    named methods (line, fields)."""
    allowed: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "WorkflowInstanceQuerySet":
            allowed.update(id(inner) for inner in ast.walk(node))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or id(node) in allowed:
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "update":
            written = {keyword.arg for keyword in node.keywords} & QUEUE_FIELDS
            if written:
                yield node.lineno, ", ".join(sorted(written))


def test_queue_fields__admission_and_the_bells_write_through_named_methods() -> None:
    """``admitted_at``, ``alarm_at`` and ``bell_at`` of rows a caller has not loaded are
    written by ``WorkflowInstanceQuerySet``'s methods (``admit``, ``note_bell``, ...), not
    by bare ``update()`` calls; a loaded instance's by its transitions."""
    found = [
        f"{path}:{line}: update({what})"
        for path, tree in _modules()
        for line, what in _queue_field_writes(tree)
    ]

    assert found == []


def test_queue_fields__the_guard_sees_what_it_looks_for() -> None:
    tree = ast.parse(
        "WorkflowInstance.objects.filter(pk__in=pks).update(admitted_at=now, alarm_at=now)\n"
        "WorkflowInstance.objects.filter(pk=pk).update(bell_at=when)\n"
        "class WorkflowInstanceQuerySet:\n"
        "    def note_bell(self, pk, when):\n"
        "        self.filter(pk=pk).update(bell_at=when)\n"
    )

    assert [line for line, _ in _queue_field_writes(tree)] == [1, 2]
