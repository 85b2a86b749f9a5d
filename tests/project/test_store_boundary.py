"""The store holds the SQL and the database vendor: no module above it tests
``connection.vendor`` or runs a database cursor (read from the source with ``ast``, so
comments and strings cannot fool it).

Migrations are exempt: a migration must not import the app's current code (it runs against
the schema of its own time), so its vendor tests and ``schema_editor.execute`` stay in it.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "django_workerflow"
STORE = PACKAGE / "store"
MIGRATIONS = PACKAGE / "migrations"


def _is_vendor(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "vendor"


def _is_cursor(node: ast.AST) -> bool:
    """A database cursor: a name or attribute called ``cursor``, a call of ``.cursor()``,
    or the store's executor (whose ``execute`` takes one)."""
    if isinstance(node, ast.Call):
        return isinstance(node.func, ast.Attribute) and node.func.attr == "cursor"
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", "")
    return name.endswith("cursor") or name == "executor"


def _is_vendor_test(node: ast.AST) -> bool:
    return isinstance(node, ast.Compare) and any(
        _is_vendor(side) for side in [node.left, *node.comparators]
    )


def _is_cursor_use(node: ast.AST) -> bool:
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return False
    attr = node.func.attr
    return attr == "cursor" or (attr == "execute" and _is_cursor(node.func.value))


def violations(source: str) -> list[str]:
    """Each vendor comparison, ``.cursor()`` call and ``.execute()`` on a cursor in
    ``source``, as ``line: text``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if _is_vendor_test(node) or _is_cursor_use(node):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_store_boundary__no_vendor_test_and_no_cursor_outside_the_store():
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.is_relative_to(STORE) or path.is_relative_to(MIGRATIONS):
            continue
        name = str(path.relative_to(PACKAGE))
        if lines := violations(path.read_text()):
            found[name] = lines
    assert not found, (
        f"SQL or a vendor test outside django_workerflow/store/: {found}. Give the store an "
        "intent-named function that keeps both dialects side by side, and call it."
    )


def test_store_boundary__tells_a_cursor_from_a_workflows_execute():
    assert violations("definition.execute()\n# connection.vendor == 'x'\ns = 'cursor()'") == []
    assert violations("if connection.vendor == 'postgresql': pass") != []
    assert violations("with connection.cursor() as c: pass") != []
    assert violations("cursor.execute('SELECT 1')") != []
    assert violations("executor.execute(cursor, 'read_steps', {})") != []
