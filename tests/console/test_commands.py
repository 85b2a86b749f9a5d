"""``manage.py workerflow``: every subcommand, its output and its error paths."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command, load_command_class
from django.core.management.base import CommandError

import django_workerflow as workerflow
from django_workerflow.console.terminal import MAX_PROGRESS_MESSAGE
from django_workerflow.models import (
    InboundEvent,
    Step,
    StepEvent,
    WorkflowEvent,
    WorkflowInstance,
    WorkflowStatus,
)
from django_workerflow.runtime import purge
from tests.support.commands import manage
from tests.support.instances import status_of

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> str:
    out = StringIO()
    call_command("workerflow", *args, stdout=out)
    return out.getvalue()


def shop_execute(self):
    self.run("reserve", lambda: {"sku": "A-1"})
    self.sleep("cool-off", 3600)
    return self.wait("payment", "payment.received")


@pytest.fixture
def shop_v1(define):
    return define(shop_execute, name="shop", version="v1")


@pytest.fixture
def sleeping_order(shop_v1, workerflow_harness):
    """Instance ``s-1`` running, asleep in step 'cool-off'."""
    workerflow.start(shop_v1, key="s-1", input={"order": 1})
    workerflow_harness.drain()
    return WorkflowInstance.objects.get(key="s-1")


@pytest.fixture
def waiting_order(shop_v1, workerflow_harness):
    """Instance ``w-1`` running, waiting for 'payment.received'."""
    workerflow.start(shop_v1, key="w-1")
    workerflow_harness.drain()
    workerflow_harness.advance(3600)
    return WorkflowInstance.objects.get(key="w-1")


# start ----------------------------------------------------------------------------------------


def test_start__creates_an_instance_with_its_input(shop_v1):
    out = run("start", "shop", "--key", "order-1", "--input", '{"total": 42}')

    instance = WorkflowInstance.objects.get(key="order-1")
    assert out == "Started instance 'order-1' (shop vv1): pending.\n"
    assert instance.input == {"total": 42}
    assert instance.definition_version == "v1"


def test_start__is_idempotent_on_the_key(shop_v1):
    run("start", "shop", "--key", "order-1")

    out = run("start", "shop", "--key", "order-1", "--input", '"ignored"')

    assert "already exists: pending; nothing changed" in out
    assert WorkflowInstance.objects.get().input is None


def test_start__without_a_key_uses_a_new_uuid(shop_v1):
    out = run("start", "shop")

    key = WorkflowInstance.objects.get().key
    assert len(key) == 36
    assert key in out


def test_start__pins_the_requested_version(define):
    define(shop_execute, name="shop", version="v1")
    define(shop_execute, name="shop", version="v2")

    run("start", "shop", "--key", "old", "--version", "v1")
    run("start", "shop", "--key", "new")

    assert WorkflowInstance.objects.get(key="old").definition_version == "v1"
    assert WorkflowInstance.objects.get(key="new").definition_version == "v2"


def test_start__refuses_invalid_json_input(shop_v1):
    with pytest.raises(CommandError, match=r"^--input is not valid JSON: Expecting"):
        run("start", "shop", "--input", "{total: 42}")
    assert not WorkflowInstance.objects.exists()


def test_start__refuses_an_unregistered_definition(db):
    with pytest.raises(CommandError, match="nope"):
        run("start", "nope")


def test_start__refuses_a_version_conflict(shop_v1, define):
    define(shop_execute, name="shop", version="v2")
    run("start", "shop", "--key", "k", "--version", "v1")

    with pytest.raises(CommandError, match="already pinned to 'v1'"):
        run("start", "shop", "--key", "k", "--version", "v2")


def test_start__refuses_a_non_finite_number_in_the_input(shop_v1):
    with pytest.raises(CommandError, match="not JSON-serializable"):
        run("start", "shop", "--input", '{"x": NaN}')


# send-event -----------------------------------------------------------------------------------


def test_send_event__is_claimed_by_a_waiting_step(waiting_order, workerflow_harness):
    out = run("send-event", "w-1", "payment.received", "--payload", '{"amount": 42}')

    assert out == "Event 'payment.received' sent to 'w-1': a waiting step claimed it.\n"
    workerflow_harness.drain()
    assert WorkflowInstance.objects.get(key="w-1").result == {"amount": 42}


def test_send_event__is_queued_when_no_step_waits(sleeping_order):
    out = run("send-event", "s-1", "payment.received")

    assert "queued until a step waits" in out
    event = InboundEvent.objects.get()
    assert event.claimed_by is None
    assert event.payload is None


def test_send_event__refuses_invalid_json_and_sends_nothing(waiting_order):
    with pytest.raises(CommandError, match="--payload is not valid JSON"):
        run("send-event", "w-1", "payment.received", "--payload", "[1,")
    assert not InboundEvent.objects.exists()


def test_send_event__refuses_a_payload_nested_deeper_than_python_parses(waiting_order):
    nested = "[" * 100_000 + "]" * 100_000
    with pytest.raises(CommandError, match=r"^--payload is nested 100000 levels deep, more than"):
        run("send-event", "w-1", "payment.received", "--payload", nested)
    assert not InboundEvent.objects.exists()


def test_send_event__to_a_finished_instance_is_an_error(waiting_order):
    workerflow.cancel("w-1")

    with pytest.raises(CommandError, match="'w-1' is cancelled: the event was not delivered"):
        run("send-event", "w-1", "payment.received")


def test_send_event__to_an_unknown_key_is_an_error(db):
    with pytest.raises(CommandError, match=r"^No workflow instance has the key 'ghost'\.$"):
        run("send-event", "ghost", "payment.received")


def test_send_event__refuses_a_blank_event_name(waiting_order):
    with pytest.raises(CommandError, match="An event name must not be empty"):
        run("send-event", "w-1", "  ")


# pause / resume / cancel ----------------------------------------------------------------------


def test_pause__pauses_a_running_instance(sleeping_order):
    out = run("pause", "s-1")

    assert out == "Paused 's-1': it stops at its next step boundary.\n"
    assert status_of("s-1") == WorkflowStatus.PAUSED


def test_pause__is_refused_when_pending(shop_v1):
    workerflow.start(shop_v1, key="fresh")

    with pytest.raises(CommandError, match="'fresh' is pending, not running: not paused"):
        run("pause", "fresh")
    assert status_of("fresh") == WorkflowStatus.PENDING


def test_resume__resumes_a_paused_instance(sleeping_order):
    workerflow.pause("s-1")

    assert run("resume", "s-1") == "Resumed 's-1'.\n"
    assert status_of("s-1") == WorkflowStatus.RUNNING


def test_resume__is_refused_when_not_paused(sleeping_order):
    with pytest.raises(CommandError, match="'s-1' is running, not paused"):
        run("resume", "s-1")


def test_cancel__records_the_reason(sleeping_order):
    out = run("cancel", "s-1", "--reason", "customer asked")

    assert out == "Cancelled 's-1'. Reason: customer asked\n"
    assert status_of("s-1") == WorkflowStatus.CANCELLED
    event = WorkflowEvent.objects.get(type="cancelled")
    assert event.reason == "customer asked"


def test_cancel__without_a_reason(sleeping_order):
    assert run("cancel", "s-1") == "Cancelled 's-1'.\n"
    assert WorkflowEvent.objects.get(type="cancelled").reason is None


def test_cancel__is_refused_when_already_finished(sleeping_order):
    workerflow.cancel("s-1")

    with pytest.raises(CommandError, match="'s-1' is already cancelled: not cancelled"):
        run("cancel", "s-1")


@pytest.mark.parametrize("subcommand", ["pause", "resume", "cancel", "show"])
def test_key_subcommands__report_an_unknown_key(db, subcommand):
    with pytest.raises(CommandError, match=r"^No workflow instance has the key 'ghost'\.$"):
        run(subcommand, "ghost")


# show -----------------------------------------------------------------------------------------


def test_show__prints_status_waiting_on_and_the_step_tree(define, workerflow_harness):
    attempts = []

    def flaky():
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("card declined")
        return {"charged": 42}

    def execute(self):
        def outer():
            self.run("inner", lambda: "deep")
            return self.run("charge", flaky)

        self.run("outer", outer)
        self.sleep("cool-off", 600)

    workerflow.start(define(execute, name="nested"), key="n-1", input={"order": 7})
    workerflow_harness.drain()
    workerflow_harness.advance(0.25)

    out = run("show", "n-1")

    lines = out.splitlines()
    assert lines[0] == "Instance n-1 (nested v2026-03-19): running"
    assert lines[1].startswith("Waiting on: sleeping until ")
    assert "in step 'cool-off'" in lines[1]
    assert 'Input:  {"order":7}' in lines
    assert "Steps (4):" in lines
    step_lines = lines[lines.index("Steps (4):") + 1 :]
    assert step_lines[0].startswith("  outer ")
    assert step_lines[1].startswith("    inner ")
    assert step_lines[2].startswith("    charge ")
    assert "succeeded  2 of 3 attempts" in step_lines[2]
    assert '-> {"charged":42}' in step_lines[2]
    assert step_lines[3].strip() == "attempt 1 failed: RuntimeError: card declined"
    assert step_lines[4].startswith("  cool-off ")
    assert "waiting  until " in step_lines[4]


def test_show__prints_the_result_error_and_inbound_events(waiting_order, workerflow_harness):
    workerflow.send_event("w-1", "gift.wrapped", {"ribbon": "red"})
    workerflow.send_event("w-1", "payment.received", {"amount": 42})
    workerflow_harness.drain()

    out = run("show", "w-1")

    assert 'Result: {"amount":42}' in out
    assert "Inbound events (2):" in out
    assert 'gift.wrapped  {"ribbon":"red"}  queued' in out
    assert 'payment.received  {"amount":42}  claimed by step payment' in out


def test_show__prints_why_an_instance_failed(define, workerflow_harness):
    def execute(self):
        def boom():
            raise ValueError("out of stock")

        self.run("reserve", boom, max_attempts=1)

    workerflow.start(define(execute), key="f-1")
    workerflow_harness.drain()

    out = run("show", "f-1")

    assert "Ended: failed in step 'reserve': ValueError: out of stock" in out
    assert "Error:  MaxAttemptsExceededError: Run step 'reserve' exhausted" in out
    assert "error: ValueError: out of stock" in out


def test_show__escapes_control_characters_in_user_data(define, workerflow_harness):
    def execute(self):
        self.run("evil\x1b[31m\nstep", lambda: "x")
        self.wait("w", "e")

    workerflow.start(define(execute), key="k\x1b[2J")
    workerflow_harness.drain()

    out = run("show", "k\x1b[2J")

    assert "\x1b" not in out
    assert "evil\\x1b[31m\\nstep" in out
    assert "Instance k\\x1b[2J" in out


# list -----------------------------------------------------------------------------------------


def test_list__prints_newest_first_with_what_each_waits_on(
    sleeping_order, waiting_order, workerflow_harness
):
    out = run("list")

    lines = out.splitlines()
    assert lines[0].split() == [
        "KEY",
        "DEFINITION",
        "STATUS",
        "PROGRESS",
        "UPDATED",
        "WAITING",
        "ON",
    ]
    assert lines[1].startswith("w-1 ")
    assert "waiting for event 'payment.received' in step 'payment'" in lines[1]
    assert lines[2].startswith("s-1 ")
    assert "running" in lines[2]


def test_list__filters_by_status_and_name_and_limits(sleeping_order, waiting_order, define):
    workerflow.start(define(shop_execute, name="billing"), key="b-1")
    workerflow.pause("s-1")

    paused = run("list", "--status", "paused")
    billing = run("list", "--name", "billing")
    newest = run("list", "--limit", "1")

    assert [line.split()[0] for line in paused.splitlines()[1:]] == ["s-1"]
    assert [line.split()[0] for line in billing.splitlines()[1:]] == ["b-1"]
    assert [line.split()[0] for line in newest.splitlines()[1:]] == ["b-1"]


def test_list__says_when_nothing_matches(db):
    assert run("list", "--status", "failed") == "No workflow instance matches.\n"


def test_list__refuses_an_unknown_status_and_a_bad_limit(db):
    with pytest.raises(CommandError, match="invalid choice: 'sleeping'"):
        run("list", "--status", "sleeping")
    with pytest.raises(CommandError, match="at least 1, not '0'"):
        run("list", "--limit", "0")
    with pytest.raises(CommandError, match="at least 1, not 'ten'"):
        run("list", "--limit", "ten")


# sweep ----------------------------------------------------------------------------------------


SWEPT = "overdue instances ring now, alarms due within 5 min that had no bell ring at their time."


def test_sweep__rings_every_overdue_instance_once(shop_v1, sleeping_order, workerflow_harness):
    workerflow.start(shop_v1, key="late-1")
    workerflow.start(shop_v1, key="late-2")
    workerflow_harness.clock.advance(timedelta(minutes=5))

    assert run("sweep") == f"Queued 2 bells: {SWEPT}\n"


def test_sweep__with_nothing_overdue(sleeping_order):
    assert run("sweep") == f"Queued 0 bells: {SWEPT}\n"


# purge ----------------------------------------------------------------------------------------


@pytest.fixture
def finished(shop_v1, workerflow_harness):
    """Old: c-old (completed), x-old (cancelled) and s-old (still sleeping), 31 days ago;
    then c-new completes today."""
    harness = workerflow_harness
    for key in ("c-old", "x-old", "s-old"):
        workerflow.start(shop_v1, key=key)
    harness.drain()
    harness.advance(3600)
    workerflow.send_event("c-old", "payment.received", {"amount": 1})
    workerflow.cancel("x-old", reason="test")
    workerflow.pause("s-old")
    harness.drain()
    harness.clock.advance(timedelta(days=31))
    workerflow.start(shop_v1, key="c-new")
    harness.drain()
    harness.advance(3600)
    workerflow.send_event("c-new", "payment.received", {"amount": 2})
    harness.drain()
    assert status_of("c-old") == status_of("c-new") == WorkflowStatus.COMPLETED
    return harness


def test_purge__deletes_old_finished_instances_with_all_their_rows(finished):
    c_old = WorkflowInstance.objects.get(key="c-old")

    out = run("purge", "--older-than", "30d")

    assert out.startswith("Deleted 2 finished instances (finished before ")
    assert "and their rows: " in out
    remaining = set(WorkflowInstance.objects.values_list("key", flat=True))
    assert remaining == {"s-old", "c-new"}
    for model in (Step, StepEvent, WorkflowEvent, InboundEvent):
        assert not model.objects.filter(instance_id=c_old.pk).exists()
    assert Step.objects.filter(instance__key="s-old").exists()


def test_purge__reports_row_counts(finished):
    expected_steps = Step.objects.filter(instance__key__in=["c-old", "x-old"]).count()

    out = run("purge", "--older-than", "30d")

    assert f"{expected_steps} steps" in out
    assert "1 inbound event," in out


def test_purge__dry_run_counts_and_deletes_nothing(finished):
    before = WorkflowInstance.objects.count()

    out = run("purge", "--older-than", "30d", "--dry-run")

    assert out.startswith("Would delete 2 finished instances")
    assert "0 finish deliveries" in out  # not Django's default plural, "deliverys"
    assert WorkflowInstance.objects.count() == before


def test_purge__only_the_given_status(finished):
    run("purge", "--older-than", "30d", "--status", "cancelled")

    remaining = set(WorkflowInstance.objects.values_list("key", flat=True))
    assert remaining == {"c-old", "s-old", "c-new"}


def test_purge__never_touches_a_newer_or_unfinished_instance(finished):
    out = run("purge", "--older-than", "365d")

    assert out.startswith("No instance finished before ")
    assert WorkflowInstance.objects.count() == 4


def test_purge__works_in_batches(finished, shop_v1, workerflow_harness):
    for n in range(5):
        workerflow.start(shop_v1, key=f"x-{n}")
    workerflow_harness.drain()
    for n in range(5):
        workerflow.cancel(f"x-{n}")
    workerflow_harness.clock.advance(timedelta(days=2))

    report = purge.purge(timedelta(days=1), batch_size=2)

    assert report.instances == 5 + 3  # the x-n, c-new (2 days ago), c-old and x-old
    assert set(WorkflowInstance.objects.values_list("key", flat=True)) == {"s-old"}


def test_purge__refuses_an_unfinished_status(db):
    with pytest.raises(CommandError, match="invalid choice: 'running'"):
        run("purge", "--older-than", "1d", "--status", "running")
    with pytest.raises(purge.WorkflowInputError, match="not a finished status"):
        purge.purge(timedelta(days=1), ["paused"])


@pytest.mark.parametrize("text", ["30", "3x", "d", "-1d", "1.5h", ""])
def test_purge__refuses_a_malformed_duration(db, text):
    with pytest.raises(CommandError, match="is not a duration"):
        run("purge", f"--older-than={text}")


def test_purge__requires_older_than(db):
    with pytest.raises(CommandError, match="required: --older-than"):
        run("purge")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", timedelta(seconds=90)),
        ("45m", timedelta(minutes=45)),
        ("12h", timedelta(hours=12)),
        ("30d", timedelta(days=30)),
        ("2w", timedelta(weeks=2)),
    ],
)
def test_parse_duration__reads_each_unit(text, expected):
    assert purge.parse_duration(text) == expected


# Exit codes, from a real process --------------------------------------------------------------


@pytest.mark.slow  # seconds of real processes or real time: `make test-fast` leaves it out
@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "manage.py workerflow: error: the following arguments are required: SUBCOMMAND"),
        (("frobnicate",), "invalid choice: 'frobnicate'"),
        (("start",), "manage.py workerflow start: error: the following arguments are required"),
        (("list", "--limit", "-3"), "expected a whole number of at least 1"),
        (("purge", "--older-than", "soon"), "'soon' is not a duration"),
        (("purge", "--older-than", "1d", "--status", "running"), "invalid choice: 'running'"),
    ],
)
def test_command_line__bad_arguments_exit_2_with_one_line(args, message):
    result = manage("workerflow", *args)

    assert result.returncode == 2
    assert result.stdout == ""
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr


@pytest.mark.slow  # seconds of real processes or real time: `make test-fast` leaves it out
def test_command_line__a_refused_operation_exits_1_with_one_line(tmp_path):
    db_path = tmp_path / "cli.sqlite3"
    migrate = manage("migrate", "--verbosity", "0", db_path=db_path)
    assert migrate.returncode == 0, migrate.stderr

    shown = manage("workerflow", "show", "ghost", db_path=db_path)
    started = manage("workerflow", "start", "no-such-workflow", db_path=db_path)
    bad_json = manage("workerflow", "send-event", "ghost", "e", "--payload", "{", db_path=db_path)
    listed = manage("workerflow", "list", db_path=db_path)

    assert shown.returncode == 1
    assert shown.stderr == "CommandError: No workflow instance has the key 'ghost'.\n"
    assert started.returncode == 1
    assert started.stderr.startswith("CommandError: ")
    assert len(started.stderr.strip().splitlines()) == 1
    assert bad_json.returncode == 1
    assert bad_json.stderr.startswith("CommandError: --payload is not valid JSON")
    assert listed.returncode == 0
    assert listed.stdout == "No workflow instance matches.\n"


@pytest.mark.slow  # seconds of real processes or real time: `make test-fast` leaves it out
def test_command_line__show_into_a_closed_pipe_exits_quietly(tmp_path):
    # As `workerflow show KEY | head` once `head` has gone: the reading end is closed.
    db_path = tmp_path / "cli.sqlite3"
    assert manage("migrate", "--verbosity", "0", db_path=db_path).returncode == 0
    assert manage("workerflow", "start", "order-fulfillment", "--key", "o-1", db_path=db_path)
    reading, writing = os.pipe()
    os.close(reading)
    try:
        shown = subprocess.run(
            [sys.executable, "manage.py", "workerflow", "show", "o-1"],
            cwd=ROOT,
            env={**os.environ, "WORKERFLOW_DB": "sqlite", "WORKERFLOW_SQLITE_PATH": str(db_path)},
            stdout=writing,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        os.close(writing)

    assert shown.stderr == ""
    assert shown.returncode == 1


# progress -----------------------------------------------------------------------------


def test_show_and_list__print_the_progress(define, workerflow_harness):
    def execute(self):
        self.set_progress(3, 4, message="copying\x1b[2J")
        self.wait("go", "go")

    workerflow.start(define(execute), key="p-1")
    workerflow.start(define(lambda self: self.wait("go", "go")), key="p-2")
    workerflow_harness.drain()

    assert "Progress: [###############.....] 75% (3 of 4): copying\\x1b[2J" in run("show", "p-1")
    assert "Progress" not in run("show", "p-2")
    lines = {line.split()[0]: line.split() for line in run("list").splitlines()[1:]}
    # after the key, the name, its version, the status
    assert lines["p-1"][4:6] == ["75%:", "copying\\x1b[2J"]
    assert lines["p-2"][4] == "-"


def test_list__cuts_a_long_progress_message_and_shows_a_count_without_a_total(
    define, workerflow_harness
):
    message = "importing the rows of " + "x" * 60
    workerflow.start(
        define(lambda self: (self.set_progress(3, 4, message=message), self.wait("go", "go"))),
        key="long",
    )
    workerflow.start(
        define(lambda self: (self.set_progress(17, message="rows"), self.wait("go", "go"))),
        key="count",
    )
    workerflow_harness.drain()

    listed = run("list")
    assert f"75%: {message[: MAX_PROGRESS_MESSAGE - 1]}…" in listed
    assert message[:MAX_PROGRESS_MESSAGE] not in listed
    assert "17: rows" in listed


def options_of_subcommands(parser: argparse.ArgumentParser) -> dict[str, list[list[str]]]:
    """Each subcommand of the parser and its options (each as its spellings), ``-h`` left out."""
    # argparse has no public way to list a parser's arguments.
    actions = parser._actions  # noqa: SLF001 - argparse's list of the parser's arguments
    (subcommands,) = [action for action in actions if isinstance(action.choices, dict)]
    return {
        name: [
            action.option_strings
            for action in subparser._actions  # noqa: SLF001 - as above
            if action.option_strings and "--help" not in action.option_strings
        ]
        for name, subparser in subcommands.choices.items()
    }


def test_operations_page__its_command_table_names_every_subcommand_and_option():
    """docs/operations.md's table has a row per subcommand, with each of its options."""
    command = load_command_class("django_workerflow", "workerflow")
    subcommands = options_of_subcommands(command.create_parser("manage.py", "workerflow"))
    text = (ROOT / "docs" / "operations.md").read_text()
    table = text[text.index("| Subcommand |") :].split("\n\n")[0]
    # The first cell of each row: one or more `NAME ...` forms ("`pause KEY`, `resume KEY`").
    documented = {}
    for cell in re.findall(r"^\| (`[a-z].*?) \| ", table, re.MULTILINE):
        for form in re.findall(r"`([^`]+)`", cell):
            documented[form.split()[0]] = cell
    assert set(subcommands) - set(documented) == set(), "subcommands missing from the table"
    missing = [
        f"{name} {spellings[-1]}"
        for name, options in subcommands.items()
        for spellings in options
        if not any(
            re.search(rf"{re.escape(spelling)}\b", documented[name]) for spelling in spellings
        )
    ]
    assert missing == [], "options missing from the table"
