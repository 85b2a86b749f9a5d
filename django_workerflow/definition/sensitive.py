"""The sensitive fields of instances: which paths their definitions name, who may see the
values, and the masker of an instance (or of a page of them) for every surface that shows
payloads: the admin, ``manage.py workerflow show``, ``list`` and ``export``.

The paths that apply to an instance are those of every registered version of its
definition: a path a newer version adds masks the older instances' values too, and an
instance whose version no process has any more is still masked by the others'.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django_workerflow import registry
from django_workerflow.models import InboundEvent, Step, StepState, WorkflowInstance
from django_workerflow.values.masking import Masker, SensitivePath, parse_all
from django_workerflow.values.sealing import Sealer, codec, open_value

#: The codename of the permission to see sensitive values in the admin (its app label is
#: the app's, ``workerflow``: ``user.has_perm("workerflow.view_sensitive_payloads")``).
PERMISSION_CODENAME = "view_sensitive_payloads"
PERMISSION = f"workerflow.{PERMISSION_CODENAME}"
#: A masker that hides nothing: for readers allowed to see the values (it opens the
#: values sealed at rest, as every masker built here does).
REVEALED = Masker(opener=open_value)

_VALUE_STATES = (StepState.SUCCEEDED, StepState.SATISFIED)


def paths(name: str) -> tuple[SensitivePath, ...]:
    """The sensitive paths of every registered version of the definition ``name``."""
    found: dict[str, SensitivePath] = {}
    for version in registry.versions(name):
        definition = registry.lookup(name, version)
        if definition is not None:
            for path in parse_all(definition.sensitive):
                found.setdefault(path.text, path)
    return tuple(found.values())


def sealer(name: str) -> Sealer:
    """The sealer of the definition ``name``'s values (it seals nothing without
    ``WORKERFLOW_PAYLOAD_CODEC`` or without sensitive paths)."""
    if codec() is None:  # the common case, decided without reading the registry
        return Sealer()
    found = paths(name)
    return Sealer.of(found) if found else Sealer()


def may_reveal(user: Any) -> bool:
    """Whether ``user`` may see sensitive values (superusers may, as ``has_perm`` says)."""
    return bool(user.has_perm(PERMISSION))


def masker_for(instance: WorkflowInstance, *, reveal: bool = False) -> Masker:
    """The masker of ``instance``'s values (:data:`REVEALED` with ``reveal``, or when its
    definition names no sensitive path). It reads the instance's step values and inbound
    event payloads, so that their sensitive values are masked in error texts too."""
    return maskers_for([instance], reveal=reveal).get(instance.pk, REVEALED)


def maskers_for(instances: Iterable[WorkflowInstance], *, reveal: bool) -> dict[int, Masker]:
    """The masker of each instance by primary key, in two queries for a whole page (none
    with ``reveal`` or when no definition on the page names a sensitive path)."""
    if reveal:
        return {}
    declared = {}
    by_name: dict[str, tuple[SensitivePath, ...]] = {}
    for instance in instances:
        name = instance.definition_name
        if name not in by_name:
            by_name[name] = paths(name)
        found = by_name[name]
        if found:
            declared[instance.pk] = (instance, found)
    if not declared:
        return {}
    steps: dict[int, list[tuple[str, str, Any]]] = {pk: [] for pk in declared}
    rows = Step.objects.filter(instance_id__in=list(declared), state__in=_VALUE_STATES)
    for instance_id, step_id, event_name, state, result, payload in rows.values_list(
        "instance_id", "step_id", "event_name", "state", "result", "payload"
    ):
        value = payload if state == StepState.SATISFIED else result
        steps[instance_id].append((step_id, event_name, value))
    events: dict[int, list[tuple[str, Any]]] = {pk: [] for pk in declared}
    inbound = InboundEvent.objects.filter(instance_id__in=list(declared))
    for instance_id, event_name, payload in inbound.values_list(
        "instance_id", "event_name", "payload"
    ):
        events[instance_id].append((event_name, payload))
    return {
        pk: Masker.build(
            found,
            input=instance.input,
            result=instance.result,
            events=events[pk],
            steps=steps[pk],
            opener=open_value,
        )
        for pk, (instance, found) in declared.items()
    }
