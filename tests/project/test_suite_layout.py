"""The suite's own layout (docs/architecture.md#the-tests-by-layer): every test module sits
in a folder, and every folder of tests is a package, so that a test module is found where
its layer is and imported under one name."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_test_module_sits_at_the_root_of_tests():
    at_root = sorted(path.name for path in TESTS.glob("test_*.py"))

    assert at_root == [], (
        f"{', '.join(at_root)} at the root of tests/: move each into the folder of the layer "
        "it tests (tests/runtime/, tests/store/, ...; docs/architecture.md lists them)."
    )


def test_every_folder_with_test_modules_is_a_package():
    folders = {path.parent for path in TESTS.rglob("test_*.py")}
    missing = sorted(str(f.relative_to(TESTS)) for f in folders if not (f / "__init__.py").exists())

    assert missing == [], f"add an __init__.py to tests/{', tests/'.join(missing)}"
