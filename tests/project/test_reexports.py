"""One home per name: a module lists in ``__all__`` only what it defines or uses itself.

A module that imports a name only to list it again in ``__all__`` is a second address for
it (the runtime's old ``verbs`` module re-exported ``tick`` and ``start``), and a grep then
finds two homes. The packages' ``__init__`` modules are exempt: re-exporting is what a
facade is for. ruff's F401 already fails an unused import that ``__all__`` does not list.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "django_workerflow"
ROOT = Path(__file__).resolve().parents[2]


def exported(tree: ast.Module) -> list[str]:
    """The names of the module's ``__all__`` (empty without one)."""
    for node in tree.body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        if any(isinstance(target, ast.Name) and target.id == "__all__" for target in targets):
            value = node.value
            assert isinstance(value, ast.List | ast.Tuple), "__all__ must be a literal list"
            return [element.value for element in value.elts if isinstance(element, ast.Constant)]
    return []


def reexported(tree: ast.Module) -> list[str]:
    """The names ``__all__`` lists that the module imports at its top and never reads."""
    imported = {
        (alias.asname or alias.name).split(".")[0]
        for node in tree.body
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    read = {
        node.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
    }
    return [name for name in exported(tree) if name in imported and name not in read]


def test_reexported__finds_a_name_imported_only_to_be_listed() -> None:
    tree = ast.parse(
        "from a import tick, start\n"
        "from b import used\n"
        "__all__ = ['tick', 'start', 'used', 'own']\n"
        "def own():\n"
        "    return start(used)\n"
    )
    assert reexported(tree) == ["tick"]


def test_package__no_module_but_a_facade_reexports_a_name() -> None:
    found = []
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        if path.name == "__init__.py" or "migrations" in path.parts:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found += [f"{path.relative_to(ROOT)}: {name}" for name in reexported(tree)]
    assert found == [], (
        "These modules list in __all__ a name they only import; import it from the module "
        "that defines it instead, and drop it from __all__: " + ", ".join(found)
    )
