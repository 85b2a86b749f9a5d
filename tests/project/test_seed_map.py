"""tests/SEED.md maps each of the seed's 112 tests to a pytest test that exists."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SEED_MAP = ROOT / "tests" / "SEED.md"
SEED_TESTS = 112
REFERENCE = re.compile(r"^\| [^|]+ \| `(?P<path>tests/[\w/]+\.py)::(?P<function>\w+)` \|", re.M)


def references() -> list[tuple[str, str]]:
    """Each table row's (path, test function), in the order SEED.md lists them."""
    text = SEED_MAP.read_text(encoding="utf-8")
    return [(match["path"], match["function"]) for match in REFERENCE.finditer(text)]


def table_rows() -> list[str]:
    """The table rows of SEED.md that name a seed test (not headers or separators)."""
    lines = SEED_MAP.read_text(encoding="utf-8").splitlines()
    return [
        line
        for line in lines
        if line.startswith("| ") and not line.startswith(("| Seed test", "| ---"))
    ]


def module_functions(path: Path) -> set[str]:
    """The names of the functions defined at the top level of a test module."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}


def test_seed_map__has_one_reference_for_each_of_the_seed_tests():
    rows = table_rows()

    assert len(rows) == SEED_TESTS
    assert len(references()) == SEED_TESTS, "a row does not name its test as `path::function`"


def test_seed_map__every_reference_names_a_test_function_that_exists():
    functions: dict[Path, set[str]] = {}
    missing = []
    for path, function in references():
        module = ROOT / path
        if not module.exists():
            missing.append(f"{path} (no such file)")
            continue
        if module not in functions:
            functions[module] = module_functions(module)
        if function not in functions[module]:
            missing.append(f"{path}::{function}")

    assert missing == [], "tests/SEED.md points at tests that do not exist"
