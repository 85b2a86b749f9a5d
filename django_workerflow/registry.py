"""Definitions by name and version, filled as definition classes are created."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from django.apps import apps

from django_workerflow.exceptions import WorkflowDefinitionError, WorkflowNotRegisteredError

if TYPE_CHECKING:
    from django_workerflow.definition.workflow import WorkflowDefinition

_definitions: dict[str, dict[str, type[WorkflowDefinition]]] = {}
# Inside testing.registered(): a definition with a taken name and version replaces it.
_replacing = 0
# Called with a name nobody registered: each may register it (the django.tasks backend
# defines a task's definition when its module is imported), see add_loader().
_loaders: list[Callable[[str], None]] = []
# Definitions registered once Django's apps were ready: not while the process set up (an
# app's ready() and what it imports, the `workflows` modules), which every process does, a
# worker too, but later (a view's module, imported with the URLconf): see check W011.
_after_setup: set[type[WorkflowDefinition]] = set()


def add_loader(loader: Callable[[str], None]) -> None:
    """Ask ``loader(name)`` to register a definition that is looked up but unknown (a
    worker that never imported the code that defines it)."""
    if loader not in _loaders:
        _loaders.append(loader)


def _versions_of(name: str) -> dict[str, type[WorkflowDefinition]] | None:
    versions = _definitions.get(name)
    if not versions:
        for loader in _loaders:
            loader(name)
        versions = _definitions.get(name)
    return versions


def version_sort_key(version: str) -> tuple[tuple[int, int, str], ...]:
    """Order versions naturally: "2" < "10", "2026-03-19" < "2026-03-20"."""
    return tuple(
        (0, int(part), "") if part.isdigit() else (1, 0, part)
        for part in re.findall(r"\d+|\D+", version)
    )


def register(definition: type[WorkflowDefinition]) -> None:
    versions = _definitions.setdefault(definition.name, {})
    existing = versions.get(definition.version)
    if existing is not None and existing is not definition and not _replacing:
        raise WorkflowDefinitionError(
            f"Workflow definition {definition.name!r} version {definition.version!r} is "
            f"registered twice: by {existing.__module__}.{existing.__qualname__} and by "
            f"{definition.__module__}.{definition.__qualname__}. Give one of them another "
            "version."
        )
    versions[definition.version] = definition
    if apps.ready:
        _after_setup.add(definition)


def registered_after_setup(definition: type[WorkflowDefinition]) -> bool:
    """Whether ``definition`` was registered after Django set its apps up in this process,
    so that another process (a worker) may not have it."""
    return definition in _after_setup


def unregister(definition: type[WorkflowDefinition]) -> None:
    """Forget ``definition`` (for tests that define throwaway workflows)."""
    versions = _definitions.get(definition.name, {})
    _after_setup.discard(definition)
    if versions.get(definition.version) is definition:
        del versions[definition.version]
        if not versions:
            del _definitions[definition.name]


def get(name: str, version: str | None = None) -> type[WorkflowDefinition]:
    """The definition registered as ``name`` at ``version`` (default: the highest)."""
    versions = _versions_of(name)
    if not versions:
        known = ", ".join(sorted(_definitions)) or "none"
        raise WorkflowNotRegisteredError(
            f"No workflow definition is registered under the name {name!r} (registered: "
            f"{known}). Define it in a `workflows` module of an installed app."
        )
    if version is None:
        return versions[max(versions, key=version_sort_key)]
    try:
        return versions[version]
    except KeyError:
        known = ", ".join(sorted(versions, key=version_sort_key))
        raise WorkflowNotRegisteredError(
            f"Workflow definition {name!r} has no version {version!r} (registered: {known})."
        ) from None


def lookup(name: str, version: str) -> type[WorkflowDefinition] | None:
    return (_versions_of(name) or {}).get(version)


def names() -> list[str]:
    return sorted(_definitions)


def versions(name: str) -> list[str]:
    return sorted(_definitions.get(name, {}), key=version_sort_key)


def definitions() -> list[type[WorkflowDefinition]]:
    """Every registered definition, by name and version."""
    return [
        versions[version]
        for name in sorted(_definitions)
        for versions in (_definitions[name],)
        for version in sorted(versions, key=version_sort_key)
    ]


def snapshot() -> dict[str, dict[str, type[WorkflowDefinition]]]:
    """A copy of the registry, for :func:`restore` (testing.registered uses both)."""
    return {name: dict(versions) for name, versions in _definitions.items()}


def restore(saved: dict[str, dict[str, type[WorkflowDefinition]]]) -> None:
    """Put back the registry as :func:`snapshot` saw it."""
    _definitions.clear()
    _definitions.update({name: dict(versions) for name, versions in saved.items()})
