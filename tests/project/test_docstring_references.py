"""Every cross-reference in the package's docstrings and comments points at something that
exists: a Sphinx role (``:class:`...```, ``:func:`...```, ``:mod:`...```, ...) resolves to an
object, and a file named in prose (``see bells.py``) is a file of this repository.

References went stale when the package moved from a flat layout to its folders (a ``.lease``
written when ``lease`` was a sibling module); a reader following one found nothing.
"""

from __future__ import annotations

import builtins
import importlib
import inspect
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import django_workerflow

PACKAGE = Path(django_workerflow.__file__).parent
REPOSITORY = PACKAGE.parent
ROLE = re.compile(r":(?:class|func|meth|mod|attr|exc|data):`([^`]+)`")
FILE = re.compile(r"(?<![\w./-])((?:[\w-]+/)*[\w-]+\.py)\b")
# Files named in prose that are not this repository's (a user's project has them).
FOREIGN_FILES = {"manage.py", "settings.py", "urls.py", "workflows.py", "tasks.py"}


def _sources() -> Iterator[tuple[Path, str]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        if "migrations" not in path.parts:
            yield path, path.read_text()


def _module_name(path: Path) -> str:
    dotted = ".".join(path.relative_to(REPOSITORY).with_suffix("").parts)
    return dotted.removesuffix(".__init__")


def _attribute_chain(obj: Any, names: list[str]) -> bool:
    for name in names:
        if not hasattr(obj, name):
            # An instance attribute is set on self, not on the class.
            return inspect.isclass(obj) and _sets_on_self(obj, name)
        obj = getattr(obj, name)
    return True


def _sets_on_self(cls: type, name: str) -> bool:
    return re.search(rf"\bself\.{re.escape(name)}\s*[:=]", inspect.getsource(cls)) is not None


def _absolute(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        return _attribute_chain(module, parts[cut:])
    return False


def _local_classes(module: ModuleType) -> list[type]:
    return [
        cls
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if cls.__module__ == module.__name__
    ]


def resolves(target: str, module_name: str) -> bool:
    """Whether a role's target names an object, read as Sphinx reads it from ``module_name``:
    ``~`` only shortens the shown text, a leading ``.`` is relative to the module's package,
    and a bare name is looked up in the module, its classes, then the builtins."""
    target = re.sub(r"^.*<(.+)>$", r"\1", target).removeprefix("~")
    if target.startswith("."):
        base = module_name.rsplit(".", 1)[0]
        target = target[1:]
        while target.startswith("."):
            base, target = base.rsplit(".", 1)[0], target[1:]
        return _absolute(f"{base}.{target}")
    if target.startswith("django_workerflow"):
        return _absolute(target)
    module = importlib.import_module(module_name)
    names = target.split(".")
    owners: list[Any] = [module, *_local_classes(module), builtins]
    return any(_attribute_chain(owner, names) for owner in owners)


def test_every_role_in_a_docstring_resolves() -> None:
    unresolved = [
        f"{path.relative_to(REPOSITORY)}:{text[: found.start()].count(chr(10)) + 1}: "
        f"{found.group(0)}"
        for path, text in _sources()
        for found in ROLE.finditer(text)
        if not resolves(found.group(1), _module_name(path))
    ]
    assert unresolved == [], (
        "These cross-references name nothing; write the target's full dotted path "
        "(django_workerflow.<folder>.<module>.<name>):\n" + "\n".join(unresolved)
    )


def _exists(named: str) -> bool:
    if (REPOSITORY / named).exists() or (PACKAGE / named).exists():
        return True
    if "/" in named:
        return False
    return any(REPOSITORY.glob(f"**/{named}"))


def test_every_file_named_in_the_package_exists() -> None:
    missing = [
        f"{path.relative_to(REPOSITORY)}:{text[: found.start()].count(chr(10)) + 1}: {named}"
        for path, text in _sources()
        for found in FILE.finditer(text)
        if (named := found.group(1)) not in FOREIGN_FILES and not _exists(named)
    ]
    assert missing == [], "These files are named but do not exist:\n" + "\n".join(missing)


@pytest.mark.parametrize(
    ("target", "module_name", "expected"),
    [
        (".sql", "django_workerflow.store.lease", True),
        ("~django_workerflow.store.sql.LEASE_HELD_RUNNING", "django_workerflow.broker", True),
        (".lease", "django_workerflow.runtime.tick", False),
        ("WorkflowInputError", "django_workerflow.values.storable", True),
        ("NoSuchError", "django_workerflow.values.storable", False),
        ("TimeoutError", "django_workerflow.exceptions", True),
        ("retired", "django_workerflow.process_counters", True),
        ("title <django_workerflow.engine.execution.Execution.patched>", "x", True),
    ],
)
def test_the_resolver_tells_a_live_reference_from_a_stale_one(
    target: str, module_name: str, expected: bool
) -> None:
    assert resolves(target, module_name) is expected
