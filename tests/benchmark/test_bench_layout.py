"""The benchmark's import shape, read from its source (ast only): the modules of bench/
import each other without a cycle, function-level imports included, as the package's own
modules do (tests/unit/test_layout.py)."""

from __future__ import annotations

import ast
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def bench_imports() -> dict[str, set[str]]:
    """Each module of bench/ (``bench/benchapp`` included) -> the bench modules it imports,
    at module level or inside a function."""
    modules = {
        ".".join(("bench", *path.relative_to(BENCH).with_suffix("").parts)).removesuffix(
            ".__init__"
        ): path
        for path in sorted(BENCH.rglob("*.py"))
        if "migrations" not in path.parts
    }
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                start = node.module or ""
                if node.level:
                    start = f"{base}.{start}".rstrip(".")
                # ``from . import report`` names a module; ``from .table import dig`` does not.
                names = [start, *(f"{start}.{alias.name}" for alias in node.names)]
            found |= {name for name in names if name in modules and name != module}
        graph[module] = found
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle found by a depth-first walk, each as the modules around it."""
    found: list[list[str]] = []
    done: set[str] = set()

    def walk(module: str, path: list[str]) -> None:
        if module in path:
            found.append(path[path.index(module) :])
            return
        if module in done:
            return
        for imported in sorted(graph.get(module, ())):
            walk(imported, [*path, module])
        done.add(module)

    for module in sorted(graph):
        walk(module, [])
    return found


def test_bench_layout__the_modules_of_bench_import_each_other_without_a_cycle() -> None:
    graph = bench_imports()

    assert "bench.table" in graph["bench.report"]  # the graph sees relative imports
    assert cycles(graph) == []


def test_bench_layout__a_cycle_through_a_function_level_import_is_found() -> None:
    # The shape the targets once had: report imported each target module inside render(),
    # and each of them imported report.
    graph = {"report": {"targets15"}, "targets15": {"report"}, "table": set()}

    assert cycles(graph) == [["report", "targets15"]]
    assert cycles({"report": {"targets", "table"}, "targets": {"table"}, "table": set()}) == []


def test_bench_layout__the_graph_holds_imports_made_inside_functions() -> None:
    graph = bench_imports()

    # bench/__main__.py imports report at module level; bench/run.py imports the
    # scenarios inside scenario_runners().
    assert "bench.report" in graph["bench.__main__"]
    assert "bench.inline" in graph["bench.run"]
