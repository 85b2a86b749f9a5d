"""``manage.py workerflow retry``, ``fork`` and ``wake``: their arguments and what they do.

The command module only dispatches here. A refused operation raises ``CommandError`` (exit 1,
one line); a bad argument is the parser's (exit 2).
"""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import CommandError, OutputWrapper

from django_workerflow.console import operations, rerun_requests
from django_workerflow.console.operations import Report
from django_workerflow.models import WorkflowInstance, WorkflowStatus
from django_workerflow.runtime.reruns import failed_children


def add_arguments(sub: argparse._SubParsersAction[Any]) -> None:
    """Add the ``retry``, ``fork`` and ``wake`` subcommands to the command's subparsers."""
    retry = sub.add_parser("retry", help="Retry a failed instance from the step that failed it.")
    retry.add_argument("key", metavar="KEY")
    retry.add_argument("--reason", help="Recorded with the retry.")
    retry.add_argument(
        "--with-children",
        action="store_true",
        help="Also retry the failed children it waits for (and theirs), in one transaction.",
    )

    fork = sub.add_parser(
        "fork", help="Start a copy of an instance, on another version, from one of its steps."
    )
    fork.add_argument("key", metavar="KEY")
    fork.add_argument(
        "--from-step",
        metavar="STEP",
        help="Run this step and all after it anew (default: keep every settled step).",
    )
    fork.add_argument(
        "--version",
        dest="fork_version",
        metavar="VERSION",
        help="The version the fork runs (default: the registered default version).",
    )
    fork.add_argument("--key", dest="fork_key", metavar="NEW_KEY", help="Default: KEY~n.")
    fork.add_argument("--reason", help="Recorded on both instances.")

    wake = sub.add_parser("wake", help="Ring an active instance's alarm now.")
    wake.add_argument("key", metavar="KEY")


def retry(
    output: OutputWrapper, *, key: str, reason: str | None, with_children: bool, **_: Any
) -> None:
    instance = WorkflowInstance.objects.get(key=key)
    failed = [c for c in failed_children(instance) if c.status == WorkflowStatus.FAILED]
    _say(output, rerun_requests.retry([instance], reason or None, with_children=with_children))
    if failed and not with_children:
        output.write(f"Run `workerflow retry {key} --with-children` to retry them with it.")


def fork(
    output: OutputWrapper,
    *,
    key: str,
    from_step: str | None,
    fork_version: str | None,
    fork_key: str | None,
    reason: str | None,
    **_: Any,
) -> None:
    instance = WorkflowInstance.objects.get(key=key)
    request = rerun_requests.ForkRequest(
        from_step=from_step, version=fork_version, key=fork_key, reason=reason or None
    )
    report, _forked = rerun_requests.fork(instance, request)
    _say(output, report)


def wake(output: OutputWrapper, *, key: str, **_: Any) -> None:
    instance = WorkflowInstance.objects.get(key=key)
    _say(output, operations.wake([instance]))


def _say(output: OutputWrapper, report: Report) -> None:
    """Print the one instance's outcome, or refuse with it."""
    if report.skipped:
        raise CommandError(report.summary())
    output.write(report.summary())
