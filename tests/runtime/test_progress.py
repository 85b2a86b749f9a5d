"""set_progress(), instance.progress, wait_progress and await_progress."""

from __future__ import annotations

import json
import math
import re
import threading
import time
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.test import RequestFactory

import django_workerflow as workerflow
from django_workerflow import WorkflowInputError, WorkflowStateError, testing
from django_workerflow.deploy import exports
from django_workerflow.models import WorkflowInstance
from django_workerflow.runtime.tick import tick
from django_workerflow.values.progress import MAX_MESSAGE_LENGTH
from django_workerflow.workers import bells
from tests.support.statements import count_tick
from tests.support.threads import in_threads

pytestmark = pytest.mark.django_db


def _progress(key: str):
    return WorkflowInstance.objects.get(key=key).progress


@pytest.fixture
def importer(define):
    """Reports progress before each of three steps, then waits for 'go'."""

    def execute(self):
        for number in range(3):
            self.set_progress(number, 3, message=f"row {number}")
            self.run(f"row-{number}", lambda: None)
        self.set_progress(3, 3, message="done")
        self.wait("go", "go")
        return "ok"

    return define(execute, name="test-importer")


def test_set_progress__is_stored_and_read_as_a_frozen_value(importer, workerflow_harness):
    instance = workerflow.start(importer, key="imp")
    assert instance.progress is None
    workerflow_harness.drain()
    instance.refresh_from_db()
    progress = instance.progress
    assert (progress.current, progress.total, progress.fraction, progress.message) == (
        3,
        3,
        1.0,
        "done",
    )
    assert progress.updated_at is not None
    with pytest.raises(AttributeError):
        progress.current = 1


def test_set_progress__without_a_total_has_no_fraction(define, workerflow_harness):
    workerflow.start(define(lambda self: self.set_progress(2.5)), key="nt")
    workerflow_harness.drain()
    progress = _progress("nt")
    assert (progress.current, progress.total, progress.fraction, progress.message) == (
        2.5,
        None,
        None,
        "",
    )


def test_set_progress__inside_a_step_callback_is_stored(define, workerflow_harness):
    def execute(self):
        self.run("work", lambda: self.set_progress(7, 10, message="inside"))
        self.wait("go", "go")

    workerflow.start(define(execute), key="cb")
    workerflow_harness.drain()
    assert (_progress("cb").current, _progress("cb").message) == (7, "inside")


@pytest.mark.parametrize(
    ("args", "kwargs", "says"),
    [
        ((-1,), {}, "must not be negative"),
        ((1, -2), {}, "must not be negative"),
        ((math.nan, 3), {}, "finite"),
        ((math.inf,), {}, "finite"),
        ((4, 3), {}, "greater than total"),
        (("1",), {}, "must be a number"),
        ((True,), {}, "must be a number"),
        ((1,), {"message": "a\x00b"}, "NUL"),
        ((1,), {"message": "\ud800"}, "surrogate"),
        ((1,), {"message": "x" * (MAX_MESSAGE_LENGTH + 1)}, "limit"),
        ((1,), {"message": 5}, "must be a string"),
        ((2**53 + 1,), {}, "more than the limit of 9007199254740992"),
        ((1, 2**53 + 1), {}, "more than the limit of 9007199254740992"),
        ((2**1024,), {}, "more than the limit of 9007199254740992"),
        ((1, 2**1024), {}, "more than the limit of 9007199254740992"),
        ((-(2**1024),), {}, "must not be negative"),
        ((1, -(2**1024)), {}, "must not be negative"),
        ((10**400, 10**401), {}, "more than the limit of 9007199254740992"),
    ],
)
def test_set_progress__refuses_bad_values_at_the_call_keeping_the_last_good_one(
    define, workerflow_harness, args, kwargs, says
):
    caught = []

    def execute(self):
        self.set_progress(1, 5, message="good")
        try:
            self.set_progress(*args, **kwargs)
        except WorkflowInputError as exc:
            caught.append(str(exc))
        self.wait("go", "go")

    workerflow.start(define(execute), key="bad")
    workerflow_harness.drain()
    assert caught
    assert says in caught[0]
    assert (_progress("bad").current, _progress("bad").message) == (1, "good")


def test_set_progress__a_message_of_the_documented_maximum_is_stored(define, workerflow_harness):
    message = "é" * MAX_MESSAGE_LENGTH
    workerflow.start(define(lambda self: self.set_progress(0, message=message)), key="long")
    workerflow_harness.drain()
    assert _progress("long").message == message


def test_set_progress__replay_writes_nothing_when_unchanged(importer, workerflow_harness):
    instance = workerflow.start(importer, key="rp")
    workerflow_harness.drain()
    before = _progress("rp")
    # Another pass replays every set_progress() call; the row keeps its value and time.
    WorkflowInstance.objects.filter(pk=instance.pk).update(alarm_at=workerflow_harness.now())
    counter = count_tick(instance.pk)
    assert not [s for s in counter.statements if "SET progress_current" in s]
    assert _progress("rp") == before


def test_set_progress__a_step_that_does_not_change_it_costs_no_statement(define):
    def plain(self):
        for number in range(5):
            self.run(f"s{number}", lambda: None)
        self.sleep("rest", 60)

    def reporting(self):
        self.set_progress(1, 2)
        for number in range(5):
            self.run(f"s{number}", lambda: None)
        self.sleep("rest", 60)

    plain, reporting = define(plain), define(reporting)
    for definition in (plain, reporting):  # PostgreSQL prepares each statement once
        count_tick(workerflow.start(definition).pk)
    first = count_tick(workerflow.start(plain).pk)
    second = count_tick(workerflow.start(reporting).pk)
    # One progress write, carried by the first step's transaction: no transaction more.
    assert len(second.statements) == len(first.statements) + 1
    assert second.transactions == first.transactions


def test_set_progress__is_written_with_the_next_step_write(define):
    seen = []

    def execute(self):
        self.set_progress(1, 2, message="first")
        # The step's start committed the progress: a reader sees it while the step runs.
        self.run("look", lambda: seen.append(_progress_outside(self.key)))
        self.sleep("rest", 60)

    instance = workerflow.start(define(execute), key="next")
    tick(instance.pk)
    assert seen == [(1, "first")]


def _progress_outside(key: str):
    progress = WorkflowInstance.objects.get(key=key).progress
    return None if progress is None else (progress.current, progress.message)


def test_check_replay__a_changed_progress_call_is_never_drift(define, workerflow_harness):
    def old(self):
        self.set_progress(1, 3, message="old")
        self.run("a", lambda: 1)
        self.wait("go", "go")

    def new(self):
        self.set_progress(2, 9, message="new text")
        self.run("a", lambda: 1)
        self.set_progress(3, 9)
        self.wait("go", "go")

    definition = define(old, name="test-drift-progress")
    instance = workerflow.start(definition, key="drift")
    workerflow_harness.drain()
    changed = type(
        "Changed",
        (workerflow.WorkflowDefinition,),
        {
            "name": definition.name,
            "version": definition.version,
            "execute": new,
            "__module__": __name__,
        },
        register=False,
    )
    report = testing.replay(exports.export_history(instance), changed)
    assert not report.breaks, report
    assert not report.unreached, report


def test_fork__starts_with_the_source_progress(importer, workerflow_harness):
    source = workerflow.start(importer, key="src")
    workerflow_harness.drain()
    fork = workerflow.fork(source, from_step="row-2", key="src-fork")
    fork.refresh_from_db()
    assert fork.progress == _progress("src")


# wait_progress -------------------------------------------------------------------------


def test_wait_progress__under_the_harness_drains_then_returns(importer, workerflow_harness):
    workerflow.start(importer, key="w1")
    progress = workerflow.wait_progress("w1")
    assert (progress.current, progress.message) == (3, "done")


def test_wait_progress__under_the_harness_raises_timeout_at_once(importer, workerflow_harness):
    instance = workerflow.start(importer, key="w2")
    last = workerflow.wait_progress(instance)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        workerflow.wait_progress(instance, after=last, timeout=30)
    assert time.monotonic() - started < 5


def test_wait_progress__a_finished_instance_without_newer_progress_raises_at_once(
    define, workerflow_harness
):
    workerflow.start(define(lambda self: self.set_progress(1)), key="fin")
    last = workerflow.wait_progress("fin")
    with pytest.raises(TimeoutError, match="finished"):
        workerflow.wait_progress("fin", after=last)


def test_wait_progress__an_unknown_key_raises_what_wait_result_raises():
    with pytest.raises(WorkflowInstance.DoesNotExist):
        workerflow.wait_progress("nobody")
    with pytest.raises(WorkflowInstance.DoesNotExist):
        workerflow.wait_result("nobody")
    with pytest.raises(WorkflowInputError):
        workerflow.wait_progress("bad\x00key")


def test_wait_progress__refuses_an_after_that_is_not_a_progress(importer, workerflow_harness):
    workerflow.start(importer, key="w3")
    with pytest.raises(WorkflowInputError, match="after"):
        workerflow.wait_progress("w3", after=3)


def test_await_progress__under_the_harness_drains_then_returns(importer, workerflow_harness):
    workerflow.start(importer, key="w4")
    progress = async_to_sync(workerflow.await_progress)("w4")
    assert progress.message == "done"


def test_wait_progress__inside_a_transaction_is_refused(define):
    workerflow.start(define(lambda self: self.wait("go", "go")), key="tx")
    with pytest.raises(WorkflowStateError, match="transaction"):
        workerflow.wait_progress("tx", timeout=0.1)


def test_wait_progress__sees_each_value_a_ticking_worker_reports_in_order(transactional_db, define):
    """Real time, no harness: one thread ticks a workflow reporting ten values, one per
    event; another waits with wait_progress and sees every one in order (each value is sent
    once the waiter saw the one before; latency printed, not asserted)."""

    def execute(self):
        for number in range(1, 11):
            self.wait(f"go-{number}", "go")
            self.set_progress(number, 10, message=f"step {number}")
        return "done"

    with bells.suppressed():
        instance = workerflow.start(define(execute, name="test-progress-live"), key="live")
        tick(instance.pk)
    sent: list[float] = []
    seen: list[tuple[int, float]] = []
    saw = threading.Event()

    def worker() -> None:
        for _ in range(10):
            saw.clear()
            workerflow.send_event("live", "go")
            sent.append(time.monotonic())
            tick(instance.pk)
            assert saw.wait(10)

    def waiter() -> None:
        last = None
        while len(seen) < 10:
            last = workerflow.wait_progress("live", after=last, timeout=10)
            seen.append((last.current, time.monotonic()))
            saw.set()

    in_threads(waiter, worker)
    assert [current for current, _ in seen] == list(range(1, 11))
    latencies = [(at - sent[index]) * 1000 for index, (_, at) in enumerate(seen)]
    print(
        f"wait_progress on {connection.vendor}: latency median "
        f"{sorted(latencies)[5]:.1f} ms, max {max(latencies):.1f} ms over 10 values"
    )


# The views docs/progress.md shows ---------------------------------------------------------


@pytest.fixture
def doc_views():
    """The SSE and polling views of docs/progress.md, run as the page prints them."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "progress.md").read_text()
    [block] = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "progress_stream" in b]
    namespace: dict = {}
    exec(compile(block, "docs/progress.md", "exec"), namespace)
    return namespace


def _request(user):
    request = RequestFactory().get("/")
    request.user = user
    return request


def test_docs_views__stream_each_value_then_end_and_check_the_permission(
    doc_views, define, workerflow_harness, django_user_model
):
    owner = django_user_model.objects.create_user("owner")
    other = django_user_model.objects.create_user("other")

    def execute(self):
        self.set_progress(1, 2, message="half")
        return "done"

    workerflow.start(define(execute), key="doc-1", input={"user_id": owner.pk})
    response = doc_views["progress_stream"](_request(owner), "doc-1")
    assert response["Content-Type"] == "text/event-stream"
    body = b"".join(response.streaming_content).decode()
    assert body.startswith('data: {"current": 1, "total": 2, "fraction": 0.5, "message": "half"')
    assert body.endswith('event: end\ndata: "completed"\n\n')
    polled = json.loads(doc_views["progress_json"](_request(owner), "doc-1").content)
    assert polled["status"] == "completed"
    assert polled["progress"]["message"] == "half"
    for view in ("progress_stream", "progress_json"):
        with pytest.raises(PermissionDenied):
            doc_views[view](_request(other), "doc-1")


def test_set_progress__outside_an_execution_is_refused(define):
    definition = define(lambda self: None)
    with pytest.raises(WorkflowStateError, match="Step helpers only work"):
        definition(key="k", input=None).set_progress(1)
