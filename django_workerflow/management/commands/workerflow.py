"""``manage.py workerflow <subcommand>``: operate workflow instances from the command line.

Each subcommand parses its arguments and calls the runtime. A refused operation or a bad
argument exits non-zero with a one-line message, never a traceback.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from datetime import timedelta
from typing import Any, NoReturn

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import InterfaceError, OperationalError

from django_workerflow import metrics
from django_workerflow.console import attributes, describe, documents, rerun_commands, time_words
from django_workerflow.console.composition import load_composition, render_lines
from django_workerflow.console.history import load_history
from django_workerflow.console.terminal import render_list, render_show, safe
from django_workerflow.definition import sensitive
from django_workerflow.exceptions import WorkerflowError, WorkflowInputError, WorkflowStateError
from django_workerflow.management import deploy
from django_workerflow.management.stranded import list_stranded
from django_workerflow.models import TERMINAL_STATUSES, WorkflowInstance, WorkflowStatus
from django_workerflow.runtime import (
    control,
    definition_pauses,
    events,
    resealing,
    starting,
    sweeping,
)
from django_workerflow.runtime import purge as purging
from django_workerflow.values import jsonvalue, storable
from django_workerflow.values.clock import now as clock_now
from django_workerflow.workers import bells

#: The --reveal option of show, list and export (the command line masks by default).
REVEAL_HELP = (
    "Show the values the definition names `sensitive` (masked as •••• by default): for "
    "an operator allowed to read them."
)


class OneLineParser(CommandParser):
    """On the command line, print an argument error as one line (not usage + error); from
    ``call_command``, raise the CommandError that Django's parser raises."""

    def error(self, message: str) -> NoReturn:
        if self.called_from_command_line:
            self.exit(2, f"{self.prog}: error: {message} (see --help)\n")
        raise CommandError(f"Error: {message}")


class Command(BaseCommand):
    help = (
        "Operate django-workerflow instances: start, send-event, pause, resume, cancel, "
        "pause-definition, resume-definition, show, list, sweep, purge, metrics, retry, fork, "
        "wake, check-replay, export, health, reseal."
    )

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        """Django's parser, with its arguments and subcommands, inside a OneLineParser: a
        missing or unknown subcommand is reported in one line too."""
        django_parser = super().create_parser(prog_name, subcommand, add_help=False, **kwargs)
        return OneLineParser(
            prog=django_parser.prog,
            description=django_parser.description,
            formatter_class=django_parser.formatter_class,
            missing_args_message=django_parser.missing_args_message,
            called_from_command_line=django_parser.called_from_command_line,
            parents=[django_parser],
        )

    def run_from_argv(self, argv: list[str]) -> None:
        """Run from the command line; when the reader of the output has gone (``show KEY |
        head``), stop quietly with status 1, as Python's documentation advises, instead of
        a ``BrokenPipeError`` traceback."""
        try:
            super().run_from_argv(argv)
            # Flush here: the output is buffered, so a closed pipe is often found only now.
            sys.stdout.flush()
        except BrokenPipeError:
            # Python flushes stdout again at exit: point it at devnull so that flush is quiet.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(1)

    def check(self, *args: Any, **kwargs: Any) -> None:
        """Django's system checks, without the database's when it cannot be reached.

        From Django 6.0 a command runs the checks that query the database (JSONField support
        on SQLite, for one) before its subcommand; an outage must reach the subcommand, which
        says so in one line (``health`` with exit status 3), not end in their traceback.
        """
        try:
            super().check(*args, **kwargs)
        except (OperationalError, InterfaceError):
            super().check(*args, **{**kwargs, "databases": []})

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(
            dest="subcommand", metavar="SUBCOMMAND", required=True, parser_class=OneLineParser
        )
        start = sub.add_parser("start", help="Start a workflow (idempotent on --key).")
        start.add_argument("name", metavar="NAME", help="The definition's name.")
        start.add_argument("--key", help="The instance key (default: a new UUID).")
        start.add_argument("--input", default="null", help="The input as JSON.")
        start.add_argument("--version", dest="definition_version", help="A definition version.")

        send = sub.add_parser("send-event", help="Send an event to an instance.")
        send.add_argument("key", metavar="KEY")
        send.add_argument("event", metavar="EVENT")
        send.add_argument("--payload", default="null", help="The payload as JSON.")
        send.add_argument(
            "--idempotency-key",
            help="Send once per key and instance: a second send with it changes nothing.",
        )

        for name, text in (("pause", "Pause a running instance."), ("resume", "Resume it.")):
            sub.add_parser(name, help=text).add_argument("key", metavar="KEY")

        pausing = sub.add_parser(
            "pause-definition",
            help="Pause every instance of a definition, in every cluster, until resumed.",
        )
        pausing.add_argument("name", metavar="NAME", help="The definition's name.")
        pausing.add_argument("--reason", default="", help="Why (required; recorded).")
        pausing.add_argument("--actor", help="Who (default: manage.py and the OS user).")
        resuming = sub.add_parser(
            "resume-definition", help="Let a paused definition's instances go on."
        )
        resuming.add_argument("name", metavar="NAME", help="The definition's name.")
        resuming.add_argument("--reason", default="", help="Why (optional; recorded).")
        resuming.add_argument("--actor", help="Who (default: manage.py and the OS user).")

        cancel = sub.add_parser("cancel", help="Cancel an unfinished instance.")
        cancel.add_argument("key", metavar="KEY")
        cancel.add_argument("--reason", help="Recorded with the cancellation.")

        show = sub.add_parser("show", help="Show an instance's status and step tree.")
        show.add_argument("key", metavar="KEY")
        show.add_argument(
            "--traceback",
            dest="tracebacks",
            action="store_true",
            help="Also print the instance's and its failed attempts' tracebacks.",
        )
        show.add_argument("--format", choices=("text", "json"), default="text")
        show.add_argument("--reveal", action="store_true", help=REVEAL_HELP)

        listing = sub.add_parser("list", help="List instances, newest first.")
        listing.add_argument("--status", choices=WorkflowStatus.values)
        listing.add_argument("--name", help="Only instances of this definition.")
        listing.add_argument(
            "--attr",
            action="append",
            default=[],
            dest="attrs",
            metavar="NAME=VALUE",
            help="Only instances with this attribute value (repeat to require several); "
            'VALUE reads true/false and numbers as such, "42" in quotes as a string.',
        )
        listing.add_argument("--limit", type=_positive_int, default=50)
        listing.add_argument("--format", choices=("text", "json"), default="text")
        listing.add_argument(
            "--stranded",
            action="store_true",
            help="Only the unfinished instances the code now deployed cannot replay, with the "
            "reason (stored verdicts when current, else checked now); exit 1 if any.",
        )
        listing.add_argument(
            "--fresh", action="store_true", help="With --stranded: check every instance now."
        )
        listing.add_argument("--reveal", action="store_true", help=REVEAL_HELP)

        sub.add_parser(
            "sweep",
            help="Queue the missing bells: overdue instances at once, alarms coming due soon "
            "at their time.",
        )

        purge = sub.add_parser("purge", help="Delete finished instances and all their rows.")
        purge.add_argument(
            "--older-than",
            required=True,
            type=_duration,
            metavar="DURATION",
            help="Finished longer ago than this: 30d, 12h, 45m, 90s, 2w.",
        )
        purge.add_argument(
            "--status",
            action="append",
            choices=sorted(TERMINAL_STATUSES),
            help="Only this finished status (repeatable; default: all finished ones).",
        )
        purge.add_argument("--dry-run", action="store_true", help="Count, delete nothing.")

        sub.add_parser(
            "reseal",
            help="Seal the stored sensitive values again with the newest key of "
            "WORKERFLOW_FERNET_KEYS (a key rotation's middle step).",
        )

        sub.add_parser(
            "metrics",
            help="Print the Prometheus metrics, as the metrics view serves them "
            "(needs django-workerflow[metrics]).",
        )

        rerun_commands.add_arguments(sub)
        deploy.add_parsers(sub, _positive_int)

    def handle(self, *args: Any, subcommand: str, **options: Any) -> None:
        handler = getattr(self, f"handle_{subcommand.replace('-', '_')}")
        try:
            if isinstance(options.get("key"), str):
                # Every subcommand's KEY: the text rule first (a lone surrogate from an
                # undecodable argument, say), before any lookup meets the database.
                storable.check_text(options["key"], what="The instance key")
            handler(**options)
        except WorkflowInstance.DoesNotExist:
            raise CommandError(
                f"No workflow instance has the key {options.get('key')!r}."
            ) from None
        except WorkerflowError as exc:
            raise CommandError(str(exc)) from None

    # Subcommands ---------------------------------------------------------------------------

    def handle_start(
        self, *, name: str, key: str | None, input: str, definition_version: str | None, **_: Any
    ) -> None:
        value = _json(input, "--input")
        existed = key is not None and WorkflowInstance.objects.filter(key=key).exists()
        instance = starting.start(name, key=key, input=value, version=definition_version)
        what = f"'{safe(instance.key)}' ({instance.definition_name} v{instance.definition_version})"
        if existed:
            self.stdout.write(
                f"Instance {what} already exists: {instance.status}; nothing changed."
            )
        else:
            self.stdout.write(f"Started instance {what}: {instance.status}.")

    def handle_send_event(
        self,
        *,
        key: str,
        event: str,
        payload: str,
        idempotency_key: str | None = None,
        **_: Any,
    ) -> None:
        value = _json(payload, "--payload")
        sent = events.send_event(key, event, value, idempotency_key=idempotency_key)
        if sent is None:
            raise CommandError(f"Instance {key!r} is {_status(key)}: the event was not delivered.")
        if sent.claimed_by_id is not None:
            self.stdout.write(f"Event '{safe(event)}' sent to {key!r}: a waiting step claimed it.")
        else:
            waits = ", ".join(f"'{safe(name)}'" for name in sent.waiting_for or [])
            also = f" (the instance waits for {waits})" if waits else ""
            self.stdout.write(
                f"Event '{safe(event)}' sent to {key!r}: queued until a step waits{also}."
            )

    def handle_pause(self, *, key: str, **_: Any) -> None:
        if not control.pause(key):
            raise CommandError(f"Instance {key!r} is {_status(key)}, not running: not paused.")
        self.stdout.write(f"Paused {key!r}: it stops at its next step boundary.")

    def handle_resume(self, *, key: str, **_: Any) -> None:
        try:
            control.resume(key)
        except WorkflowStateError:
            raise CommandError(f"Instance {key!r} is {_status(key)}, not paused.") from None
        self.stdout.write(f"Resumed {key!r}.")

    def handle_pause_definition(
        self, *, name: str, reason: str, actor: str | None, **_: Any
    ) -> None:
        if not definition_pauses.pause_definition(name, reason=reason, actor=_actor(actor)):
            raise CommandError(f"Definition {name!r} is paused already: nothing changed.")
        self.stdout.write(
            f"Paused definition {name!r}: no attempt of its instances starts until "
            "resume-definition; running ones stop at their next step boundary."
        )

    def handle_resume_definition(
        self, *, name: str, reason: str, actor: str | None, **_: Any
    ) -> None:
        if not definition_pauses.resume_definition(name, reason=reason, actor=_actor(actor)):
            raise CommandError(f"Definition {name!r} is not paused: nothing changed.")
        self.stdout.write(f"Resumed definition {name!r}: its due instances are rung.")

    def handle_cancel(self, *, key: str, reason: str | None, **_: Any) -> None:
        if not control.cancel(key, reason=reason or None):
            raise CommandError(f"Instance {key!r} is already {_status(key)}: not cancelled.")
        self.stdout.write(f"Cancelled {key!r}." + (f" Reason: {reason}" if reason else ""))

    def handle_show(
        self,
        *,
        key: str,
        tracebacks: bool = False,
        format: str = "text",
        reveal: bool = False,
        **_: Any,
    ) -> None:
        instance = WorkflowInstance.objects.get(key=key)
        now = clock_now()
        history = load_history(instance, now, reveal=reveal)
        if format == "json":
            composition = load_composition(instance, history.masker)
            document = documents.show_document(history, composition, now, tracebacks=tracebacks)
            self.stdout.write(documents.dumps(document))
            return
        self.stdout.write(render_show(history, now, tracebacks=tracebacks))
        self.stdout.write("\n".join(render_lines(load_composition(instance, history.masker))))

    def handle_list(
        self,
        *,
        status: str | None,
        name: str | None,
        limit: int,
        format: str = "text",
        attrs: list[str] | None = None,
        stranded: bool = False,
        fresh: bool = False,
        reveal: bool = False,
        **_: Any,
    ) -> None:
        if stranded:
            list_stranded(self, limit=limit, format=format, fresh=fresh)
            return
        instances = WorkflowInstance.objects.order_by("-created_at", "-id")
        try:
            wanted = dict(attributes.parse_condition(text) for text in attrs or [])
        except WorkflowInputError as exc:
            raise CommandError(str(exc)) from None
        instances = attributes.search(instances, wanted)
        if status:
            instances = instances.filter(status=status)
        if name:
            instances = instances.filter(definition_name=name)
        page = list(instances.prefetch_related(*describe.attention_prefetches())[:limit])
        maskers = sensitive.maskers_for(page, reveal=reveal)
        if format == "json":
            document = documents.list_document(page, clock_now(), maskers)
            self.stdout.write(documents.dumps(document))
            return
        self.stdout.write(render_list(page, clock_now(), maskers))

    def handle_sweep(self, **_: Any) -> None:
        queued = sweeping.sweep()
        horizon = time_words.format_duration(bells.HORIZON)
        self.stdout.write(
            f"Queued {queued} bell{'s' if queued != 1 else ''}: overdue instances ring now, "
            f"alarms due within {horizon} that had no bell ring at their time."
        )

    def handle_purge(
        self, *, older_than: timedelta, status: list[str] | None, dry_run: bool, **_: Any
    ) -> None:
        report = purging.purge(older_than, status, dry_run=dry_run)
        when = report.cutoff.strftime("%Y-%m-%d %H:%M:%S %Z")
        if not report.instances:
            self.stdout.write(f"No instance finished before {when}: nothing to delete.")
            return
        verb = "Would delete" if dry_run else "Deleted"
        self.stdout.write(
            f"{verb} {report.instances} finished instance{'s' if report.instances != 1 else ''} "
            f"(finished before {when}) and their rows: {report.rows()}."
        )

    def handle_retry(self, **options: Any) -> None:
        rerun_commands.retry(self.stdout, **options)

    def handle_fork(self, **options: Any) -> None:
        rerun_commands.fork(self.stdout, **options)

    def handle_wake(self, **options: Any) -> None:
        rerun_commands.wake(self.stdout, **options)

    def handle_check_replay(self, **options: Any) -> None:
        deploy.check_replay(self, **options)

    def handle_export(self, **options: Any) -> None:
        deploy.export(self, **options)

    def handle_health(self, **options: Any) -> None:
        deploy.health(self, **options)

    def handle_reseal(self, **_: Any) -> None:
        rows = resealing.reseal_all()
        self.stdout.write(
            f"Sealed again with the newest key: {rows} row{'s' if rows != 1 else ''}. The "
            "older keys can now be dropped from WORKERFLOW_FERNET_KEYS."
        )

    def handle_metrics(self, **_: Any) -> None:
        try:
            exposition = metrics.text()
        except ImportError:
            raise CommandError(metrics.MISSING_EXTRA.strip()) from None
        self.stdout.write(exposition.decode(), ending="")


def _json(text: str, option: str) -> Any:
    try:
        jsonvalue.check_nesting(text, what=option)
    except WorkflowInputError as exc:
        raise CommandError(str(exc)) from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise CommandError(f"{option} is not valid JSON: {exc}.") from None


def _status(key: str) -> str:
    return WorkflowInstance.objects.values_list("status", flat=True).get(key=key)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, not {text!r}")
    return value


def _duration(text: str) -> timedelta:
    try:
        return purging.parse_duration(text)
    except WorkerflowError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _actor(given: str | None) -> str:
    """Who runs the command: ``--actor``, else ``manage.py`` and the OS user if known."""
    if given:
        return given
    try:
        return f"manage.py ({getpass.getuser()})"
    except (KeyError, OSError):  # no user name in this environment
        return "manage.py"
