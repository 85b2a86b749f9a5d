"""``manage.py workerflow list --stranded``: the unfinished instances the code now deployed
cannot replay, each with the reason (``check-replay``'s messages).

The stored verdicts answer when every unfinished instance has one for this code (the
background pass has caught up: one indexed read); otherwise every unfinished instance is
replayed now, in batches, as ``check-replay`` does, and nothing is stored.
"""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from django_workerflow.console.terminal import safe
from django_workerflow.deploy import verdicts


def list_stranded(command: BaseCommand, *, limit: int, format: str, fresh: bool) -> None:
    """Write the stranded instances, oldest first, at most ``limit``; exit 1 if any."""
    found = []
    for instance, verdict in verdicts.stranded_instances(fresh=fresh):
        found.append((instance, verdict))
        if len(found) >= limit:
            break
    if format == "json":
        command.stdout.write(
            json.dumps(
                [
                    {
                        "key": instance.key,
                        "name": instance.definition_name,
                        "version": instance.definition_version,
                        "status": instance.status,
                        "reason": verdict.reason,
                    }
                    for instance, verdict in found
                ],
                indent=2,
            )
        )
    else:
        for instance, verdict in found:
            command.stdout.write(
                f"'{safe(instance.key)}' ({safe(instance.definition_name)} "
                f"v{safe(instance.definition_version)}, {instance.status}): {safe(verdict.reason)}"
            )
        if not found:
            command.stdout.write(
                "No unfinished instance is stranded: the code now deployed replays them all."
            )
    if found:
        raise CommandError(
            f"{len(found)}{'+' if len(found) >= limit else ''} unfinished instance"
            f"{'s' if len(found) != 1 else ''} cannot replay on the code now deployed: fork "
            "them onto the current version, or cancel them (the admin's actions, or "
            "`workerflow fork` / `workerflow cancel`).",
            returncode=1,
        )
