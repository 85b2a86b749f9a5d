"""The deploy subcommands of ``manage.py workerflow``: check-replay, export, health.

Their arguments are declared here and each one calls the engine; the command's
``handle_<subcommand>`` methods only route here.
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_workerflow.console.terminal import safe
from django_workerflow.deploy import exports
from django_workerflow.deploy import health as health_probe
from django_workerflow.deploy.replay import ReplayReport
from django_workerflow.deploy.replay_check import CheckFilter, check_instances
from django_workerflow.models import WorkflowInstance

#: Exit status of a subcommand given arguments it cannot use.
BAD_ARGUMENTS = 2


def add_parsers(sub: Any, positive_int: Any) -> None:
    """Add the deploy subcommands to the command's subparsers."""
    check = sub.add_parser(
        "check-replay",
        help="Replay the history of every active instance against the code now deployed, "
        "with no side effect; exit 1 if any would break.",
    )
    check.add_argument("--name", help="Only instances of this definition.")
    check.add_argument("--version", dest="check_version", help="Only this version (with --name).")
    check.add_argument("--key", help="Only this instance.")
    check.add_argument("--limit", type=positive_int, help="Check at most this many instances.")
    check.add_argument("--include-failed", action="store_true", help="Also check failed instances.")
    check.add_argument(
        "--allow-new-steps",
        action="store_true",
        help="Report a new step reached where the history recorded another as a warning, "
        "not a break: for steps added before recorded ones (a rename would run again).",
    )
    check.add_argument("--format", choices=("text", "json"), default="text")

    export = sub.add_parser("export", help="Write an instance's whole history as JSON.")
    export.add_argument("key", metavar="KEY")
    export.add_argument("-o", "--output", metavar="FILE", help="Write here (default: stdout).")
    export.add_argument(
        "--reveal",
        action="store_true",
        help="Write the values the definition names `sensitive` (masked as •••• by default; "
        "a masked history replays with the masks as its values).",
    )

    probe = sub.add_parser(
        "health",
        help="Exit 1 when bells are overdue or no cluster has reported within --max-lag.",
    )
    probe.add_argument(
        "--max-lag",
        type=_positive_seconds,
        default=health_probe.DEFAULT_MAX_LAG,
        metavar="SECONDS",
        help="Allowed lag in seconds (default 60).",
    )


def check_replay(
    command: BaseCommand,
    *,
    name: str | None,
    check_version: str | None,
    key: str | None,
    limit: int | None,
    include_failed: bool,
    allow_new_steps: bool,
    format: str,
    **_: Any,
) -> None:
    if check_version and not name:
        raise CommandError("--version needs --name.", returncode=BAD_ARGUMENTS)
    selection = CheckFilter(name, check_version, key, limit, include_failed)
    started = time.monotonic()
    checked = 0
    breaks: list[dict[str, Any]] = []
    warnings: list[dict[str, Any]] = []
    for instance, report in check_instances(selection):
        checked += 1
        for problem in report.problems:
            entry = _entry(instance, report, problem.kind, problem.step_id, problem.message)
            breaking = problem.breaks_unless(allow_new_steps=allow_new_steps)
            (breaks if breaking else warnings).append(entry)
            if format == "text":
                label = "BREAK" if breaking else "WARN "
                command.stdout.write(
                    f"{label} '{safe(instance.key)}' ({safe(report.name)} v"
                    f"{safe(report.version)}, {instance.status}): {safe(problem.message)}"
                )
    seconds = time.monotonic() - started
    broken = len({entry["key"] for entry in breaks})
    if format == "json":
        command.stdout.write(
            json.dumps(
                {
                    "checked": checked,
                    "broken": broken,
                    "seconds": round(seconds, 3),
                    "breaks": breaks,
                    "warnings": warnings,
                },
                indent=2,
            )
        )
    else:
        rate = f", {checked / seconds:.0f}/s" if seconds > 0 and checked else ""
        warned = len({entry["key"] for entry in warnings})
        command.stdout.write(
            f"Checked {checked} instance{'s' if checked != 1 else ''} in {seconds:.2f} s"
            f"{rate}: {broken} would break, {warned} with warnings."
        )
    if broken:
        raise CommandError(
            f"{broken} of {checked} instances would break on replay with the code now "
            "deployed: keep the old code, or register the change as a new version.",
            returncode=1,
        )


def export(
    command: BaseCommand, *, key: str, output: str | None, reveal: bool = False, **_: Any
) -> None:
    instance = WorkflowInstance.objects.get(key=key)
    text = exports.dumps(exports.export_history(instance, reveal=reveal))
    if output is None:
        command.stdout.write(text, ending="")
        return
    try:
        Path(output).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise CommandError(f"Cannot write {output!r}: {exc}.") from None
    command.stdout.write(f"Wrote the history of {key!r} to {output}.")


#: ``health``'s exit status when the workers do not keep up (restart them).
HEALTH_UNHEALTHY = 1
#: ``health``'s exit status when the database cannot be reached (do not restart the workers).
HEALTH_DATABASE_UNAVAILABLE = 3


def health(command: BaseCommand, *, max_lag: timedelta, **_: Any) -> None:
    found = health_probe.check(max_lag)
    if not found.database_available:
        raise CommandError(found.message, returncode=HEALTH_DATABASE_UNAVAILABLE)
    if not found.ok:
        raise CommandError(found.message, returncode=HEALTH_UNHEALTHY)
    command.stdout.write(found.message)


def _entry(
    instance: WorkflowInstance,
    report: ReplayReport,
    kind: str,
    step_id: str | None,
    message: str,
) -> dict[str, Any]:
    return {
        "key": instance.key,
        "name": report.name,
        "version": report.version,
        "status": instance.status,
        "kind": str(kind),
        "step": step_id,
        "message": message,
    }


def _positive_seconds(text: str) -> timedelta:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds above 0, not {text!r}")
    return timedelta(seconds=value)
