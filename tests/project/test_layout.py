"""The package's import shape, read from its source (ast only, no database).

import-linter (``make lint``) holds the layers; these tests hold the two rules it cannot
see: a function-level import says why it must be late, and the imports that run (at
module level or when a function is called) form no cycle at all; and
the modules Django or pytest load before Django is set up import without it.
"""

from __future__ import annotations

import ast
import io
import os
import re
import subprocess
import sys
import tokenize
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

PACKAGE = "django_workerflow"
ROOT = Path(__file__).resolve().parents[2]
#: A comment that is only a linter's pragma says nothing about why.
PRAGMA = re.compile(r"#\s*(noqa(:\s*[A-Z0-9, ]+)?|type:\s*ignore(\[[^\]]*\])?)")


@dataclass(frozen=True)
class Source:
    module: str
    path: Path
    tree: ast.Module
    comment_lines: frozenset[int]  # lines with a comment that is more than a pragma
    blank_lines: frozenset[int]


@dataclass(frozen=True)
class Import:
    module: str
    node: ast.Import | ast.ImportFrom
    late: bool  # inside a function
    type_only: bool  # under ``if TYPE_CHECKING:``


@cache  # read and parsed once for the tests of this module (they only read it)
def sources() -> dict[str, Source]:
    """Every module of the package but its migrations, by dotted name."""
    found = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if "migrations" in parts:
            continue
        if parts[-1] == "__init__":
            parts.pop()
        text = path.read_text(encoding="utf-8")
        comments = frozenset(
            token.start[0]
            for token in tokenize.generate_tokens(io.StringIO(text).readline)
            if token.type == tokenize.COMMENT and PRAGMA.sub("", token.string).strip(" -#")
        )
        blanks = frozenset(n for n, line in enumerate(text.splitlines(), 1) if not line.strip())
        module = ".".join(parts)
        found[module] = Source(module, path, ast.parse(text), comments, blanks)
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(source: Source) -> Iterator[Import]:
    """The import statements of a module, each with where it sits."""

    def walk(node: ast.AST, late: bool, type_only: bool) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                yield Import(source.module, child, late, type_only)
            elif isinstance(child, ast.If) and not late and _is_type_checking(child.test):
                for statement in child.body:
                    yield from walk(ast.Module(body=[statement], type_ignores=[]), late, True)
                for statement in child.orelse:
                    yield from walk(ast.Module(body=[statement], type_ignores=[]), late, False)
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                yield from walk(child, True, type_only)
            else:
                yield from walk(child, late, type_only)

    yield from walk(source.tree, False, False)


def targets(statement: Import, modules: set[str], packages: set[str]) -> set[str]:
    """The package's modules an import statement loads by name (the module named, or the
    nearest enclosing one that exists), as import-linter counts them."""

    def nearest(name: str) -> str:
        while name not in modules and "." in name:
            name = name.rsplit(".", 1)[0]
        return name

    node = statement.node
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
        return {nearest(n) for n in names if n == PACKAGE or n.startswith(PACKAGE + ".")}
    base = node.module or ""
    if node.level:
        parts = statement.module.split(".")
        if statement.module not in packages:
            parts.pop()
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join([*parts, *([node.module] if node.module else [])])
    if base != PACKAGE and not base.startswith(PACKAGE + "."):
        return set()
    return {nearest(f"{base}.{alias.name}") for alias in node.names}


def has_reason(source: Source, statement: Import, late_lines: set[int]) -> bool:
    """A comment on the statement's lines, or just above it: above the block of
    function-level imports it belongs to (blank lines between them allowed)."""
    node = statement.node
    end = node.end_lineno or node.lineno
    if any(n in source.comment_lines for n in range(node.lineno, end + 1)):
        return True
    line = node.lineno - 1
    while line not in source.comment_lines and (line in source.blank_lines or line in late_lines):
        line -= 1
    return line in source.comment_lines


def convenience_edges() -> set[tuple[str, str]]:
    """The upward calls the layers contract allows (pyproject's ignore_imports)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    edges = set()
    for contract in config["tool"]["importlinter"]["contracts"]:
        for line in contract.get("ignore_imports", []):
            importer, imported = (part.strip() for part in line.split("->"))
            edges.add((importer, imported))
    return edges


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's components of ``graph``, iteratively (no recursion limit to meet)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    components.append(component)
    return components


def run_time_graph(found: dict[str, Source]) -> dict[str, set[str]]:
    """Who imports whom when the code runs: module-level and function-level imports, not
    the type-only ones, not the conveniences the contract allows."""
    modules = set(found)
    packages = {m for m, s in found.items() if s.path.name == "__init__.py"}
    allowed = convenience_edges()
    graph: dict[str, set[str]] = {module: set() for module in modules}
    for source in found.values():
        for statement in imports(source):
            if statement.type_only:
                continue
            for target in targets(statement, modules, packages):
                if target != source.module and (source.module, target) not in allowed:
                    graph[source.module].add(target)
    return graph


def test_layout__every_function_level_import_says_why_it_is_late() -> None:
    unexplained = []
    for source in sources().values():
        late = [s for s in imports(source) if s.late]
        late_lines = {n for s in late for n in range(s.node.lineno, (s.node.end_lineno or 0) + 1)}
        unexplained += [
            f"{source.path.relative_to(ROOT)}:{s.node.lineno}"
            for s in late
            if not has_reason(source, s, late_lines)
        ]
    assert unexplained == [], (
        "a function-level import needs a comment on its line or just above it saying why "
        "it must be late (or move it to the top of the module)"
    )


def test_layout__the_run_time_imports_form_no_cycle() -> None:
    graph = run_time_graph(sources())
    cycles = [sorted(c) for c in strongly_connected(graph) if len(c) > 1]
    assert cycles == []


def test_layout__the_graph_sees_function_level_imports_and_the_conveniences() -> None:
    """The check above looks at the right edges: a late import counts, an allowed
    convenience does not, and with the conveniences back the model and runtime cycle."""
    found = sources()
    graph = run_time_graph(found)
    assert f"{PACKAGE}.runtime.starting" in graph[PACKAGE]  # a verb's late import
    assert f"{PACKAGE}.runtime.control" not in graph[f"{PACKAGE}.models.instance"]
    for importer, imported in convenience_edges():
        graph[importer].add(imported)
    assert any(f"{PACKAGE}.models.instance" in c and len(c) > 2 for c in strongly_connected(graph))


#: Loaded before Django's settings and app registry are ready (docs/architecture.md).
BEFORE_SETUP = ["", ".apps", ".pytest_plugin", ".testing"]


def test_layout__the_modules_loaded_before_django_setup_import_without_settings(
    tmp_path: Path,
) -> None:
    modules = [PACKAGE + suffix for suffix in BEFORE_SETUP]
    program = "\n".join(
        [
            "import importlib",
            f"for name in {modules!r}:",
            "    importlib.import_module(name)",
            "from django.apps import apps",
            "from django.conf import settings",
            "assert not settings.configured and not apps.ready",
            "from django_workerflow.testing import Harness, registered, replay",
        ]
    )
    environment = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    done = subprocess.run(
        [sys.executable, "-c", program],
        cwd=tmp_path,  # not the repository: nothing to find a settings module in
        env=environment,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_layout__components_of_a_small_graph() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a", "e"}, "e": {"d"}, "f": set()}
    assert sorted(sorted(c) for c in strongly_connected(graph) if len(c) > 1) == [
        ["a", "b", "c"],
        ["d", "e"],
    ]
