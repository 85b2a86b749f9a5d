"""When the database goes away (issue 38): no process of ours dies of it, the log says it once,
``health`` tells it apart from wedged workers, and an event can be sent again safely.

The outage here is real but small: a PostgreSQL backend terminated from another connection,
a server port nobody listens on, an SQLite database locked by another connection beyond the
timeout or written through a read-only connection. The full faults with real clusters and a
server of their own are in ``tests/reliability/database_faults``.
"""

from __future__ import annotations

import logging
import os
import socket
import sqlite3
import subprocess
import sys
import threading
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import OperationalError, connection, connections
from django.utils import timezone

import django_workerflow as workerflow
from django_workerflow import DatabaseUnavailableError, WorkflowInputError
from django_workerflow.models import InboundEvent, Step, StepState, WorkflowInstance
from django_workerflow.store import outage

pytest.importorskip("django_q")

ON_POSTGRES = connection.vendor == "postgresql"
REPO = Path(__file__).resolve().parents[2]
OUTAGE_LOGGER = "django_workerflow.store.outage"
on_postgres = pytest.mark.skipif(not ON_POSTGRES, reason="terminates a PostgreSQL backend")
on_sqlite = pytest.mark.skipif(ON_POSTGRES, reason="an SQLite lock or read-only connection")


@pytest.fixture(autouse=True)
def no_outage_left_over() -> Any:
    outage._lost_since.clear()  # noqa: SLF001 - each test starts without an outage
    yield
    outage._lost_since.clear()  # noqa: SLF001 - and leaves none to the next


@pytest.fixture
def nothing_when_back(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Replace what runs when an outage ends (the sweeper's reseed) by a note of the call."""
    calls: list[str] = []
    monkeypatch.setattr(outage, "_when_back", [lambda: calls.append("back")])
    return calls


def terminate_backend_of_this_thread() -> None:
    """Terminate the server process of this thread's connection, from another connection
    (a restart, a pooler or a firewall cutting it): the next statement on it fails."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()

    def terminate() -> None:
        try:
            with connections["default"].cursor() as cursor:
                cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
        finally:
            connections["default"].close()

    thread = threading.Thread(target=terminate)
    thread.start()
    thread.join()


def outage_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.name == OUTAGE_LOGGER]


def broker() -> Any:
    from django_q.conf import Conf

    from django_workerflow.broker import DueFirstOrmBroker

    return DueFirstOrmBroker(list_key=Conf.CLUSTER_NAME)


def queue_bell(due_seconds_ago: float = 1.0) -> int:
    from django_q.conf import Conf
    from django_q.models import OrmQ

    due = timezone.now() - timezone.timedelta(seconds=due_seconds_ago)
    return OrmQ.objects.create(key=Conf.CLUSTER_NAME, payload="bell", lock=due).pk


# The outage log -----------------------------------------------------------------------


def test_outage__logs_one_warning_per_outage_and_one_info_when_back(caplog, nothing_when_back):
    caplog.set_level(logging.INFO, logger=OUTAGE_LOGGER)
    for attempt in range(5):
        outage.lost("default", OperationalError(f"connection refused\n(attempt {attempt})"))
    assert outage.is_lost()
    outage.back()
    outage.back()

    (warning, info) = outage_lines(caplog)
    assert warning[0] == "WARNING"
    assert warning[1].startswith(
        f"database unavailable: alias=default pid={os.getpid()} error=OperationalError: "
        "connection refused (attempt 0)."
    )
    assert info[0] == "INFO"
    assert info[1].startswith(f"database available again: alias=default pid={os.getpid()} ")
    assert "away_seconds=" in info[1]
    assert not outage.is_lost()
    assert nothing_when_back == ["back"]  # once per outage, not per success


@pytest.mark.django_db(transaction=True)
def test_outage__its_end_restarts_a_sweeper_chain_whose_link_is_overdue():
    from django_q.models import OrmQ

    from django_workerflow.models import WorkerHeartbeat
    from django_workerflow.workers import sweep_chain

    # The chain's next link was due a second ago: its task ran during the outage and failed.
    WorkerHeartbeat.objects.create(
        queue=sweep_chain.queue_name(),
        beat_at=timezone.now() - timezone.timedelta(seconds=3),
        next_beat_at=timezone.now() - timezone.timedelta(seconds=1),
    )
    outage.lost("default", OperationalError("server closed the connection"))
    outage.back()

    row = WorkerHeartbeat.objects.get()
    assert row.next_beat_at > timezone.now()
    assert OrmQ.objects.count() == 1  # the new link


# The broker ---------------------------------------------------------------------------


@on_postgres
@pytest.mark.django_db(transaction=True)
def test_broker__a_terminated_connection_costs_no_poll_and_raises_nothing(caplog):
    caplog.set_level(logging.INFO, logger=OUTAGE_LOGGER)
    queued = broker()
    assert queued.dequeue() is None  # connected, listening
    pk = queue_bell()
    terminate_backend_of_this_thread()

    taken = queued.dequeue()

    assert [bell for bell, _payload in taken or []] == [pk]
    assert outage_lines(caplog) == []  # one dead connection, replaced at once: no outage


@on_postgres
@pytest.mark.django_db(transaction=True)
def test_broker__an_acknowledgement_on_a_terminated_connection_is_not_lost(caplog):
    from django_q.models import OrmQ

    queued = broker()
    pk = queue_bell()
    assert queued.dequeue() is not None
    terminate_backend_of_this_thread()

    queued.acknowledge(pk)

    assert not OrmQ.objects.filter(pk=pk).exists()


@on_postgres
@pytest.mark.django_db(transaction=True)
def test_broker__an_enqueue_on_a_terminated_connection_is_queued_on_a_new_one():
    from django_q.models import OrmQ

    queued = broker()
    assert queued.dequeue() is None
    terminate_backend_of_this_thread()

    pk = queued.enqueue("a task")

    assert OrmQ.objects.filter(pk=pk).exists()


@on_postgres
@pytest.mark.django_db(transaction=True)
def test_broker__with_the_server_gone_claims_nothing_keeps_acknowledgements_and_logs_once(
    caplog, monkeypatch
):
    from django_q.models import OrmQ

    caplog.set_level(logging.INFO, logger=OUTAGE_LOGGER)
    queued = broker()
    pk = queue_bell()
    assert queued.dequeue() is not None
    settings_dict = connections["default"].settings_dict
    port = settings_dict["PORT"]
    connections["default"].close()
    monkeypatch.setitem(settings_dict, "PORT", free_port())  # the server is away

    assert [queued.dequeue() for _ in range(3)] == [None, None, None]
    queued.acknowledge(pk)
    monkeypatch.setitem(settings_dict, "PORT", port)  # back
    assert queued.dequeue() is None  # the bell is claimed (its acknowledgement is pending)
    queued.acknowledge(queue_bell())

    assert not OrmQ.objects.filter(pk=pk).exists()  # sent with the next acknowledgement
    lines = outage_lines(caplog)
    assert [level for level, _ in lines] == ["WARNING", "INFO"]
    assert "error=OperationalError: connection failed" in lines[0][1] or (
        "error=OperationalError" in lines[0][1]
    )


@on_sqlite
@pytest.mark.django_db(transaction=True)
def test_broker__an_sqlite_database_locked_beyond_the_timeout_is_an_outage_not_a_crash(
    caplog, monkeypatch
):
    caplog.set_level(logging.INFO, logger=OUTAGE_LOGGER)
    queued = broker()
    pk = queue_bell()
    connection.close()
    monkeypatch.setitem(connection.settings_dict["OPTIONS"], "timeout", 0.2)
    holder = sqlite3.connect(connection.settings_dict["NAME"])
    try:
        holder.execute("BEGIN EXCLUSIVE")
        assert queued.dequeue() is None
        with pytest.raises(OperationalError, match="database is locked"):
            queue_bell()  # a web process's write: a clear error, at once
    finally:
        holder.rollback()
        holder.close()

    assert [bell for bell, _payload in queued.dequeue() or []] == [pk]
    assert [level for level, _ in outage_lines(caplog)] == ["WARNING", "INFO"]
    assert "database is locked" in outage_lines(caplog)[0][1]


@on_sqlite
@pytest.mark.django_db(transaction=True)
def test_broker__a_read_only_sqlite_database_is_an_outage_and_a_web_write_fails_clearly(
    caplog, monkeypatch
):
    caplog.set_level(logging.INFO, logger=OUTAGE_LOGGER)
    queued = broker()
    pk = queue_bell()
    options = connection.settings_dict["OPTIONS"]
    connection.close()
    # Every new connection read-only, as with a file the process may not write to (root
    # ignores file modes, so the test cannot use them).
    monkeypatch.setitem(options, "init_command", options["init_command"] + " PRAGMA query_only=ON;")

    assert queued.dequeue() is None
    with pytest.raises(OperationalError, match="readonly database"):
        queue_bell()
    monkeypatch.setitem(
        options, "init_command", options["init_command"].replace(" PRAGMA query_only=ON;", "")
    )
    connection.close()

    assert [bell for bell, _payload in queued.dequeue() or []] == [pk]  # nothing lost
    lines = outage_lines(caplog)
    assert [level for level, _ in lines] == ["WARNING", "INFO"]
    assert "attempt to write a readonly database" in lines[0][1]


@on_sqlite
@pytest.mark.django_db(transaction=True)
def test_tick__on_an_sqlite_database_locked_beyond_the_timeout__database_unavailable_error(
    define, monkeypatch
):
    from django_workerflow import tasks

    instance = workerflow.start(define(lambda self: self.run("one", lambda: 1)), key="locked")
    connection.close()
    monkeypatch.setitem(connection.settings_dict["OPTIONS"], "timeout", 0.2)
    holder = sqlite3.connect(connection.settings_dict["NAME"])
    try:
        holder.execute("BEGIN EXCLUSIVE")
        with pytest.raises(DatabaseUnavailableError, match="database is locked"):
            tasks.tick(instance.pk)
    finally:
        holder.rollback()
        holder.close()

    tasks.tick(instance.pk)  # the lock is gone: the same tick again, nothing lost
    instance.refresh_from_db()
    assert (instance.status, instance.result) == ("completed", 1)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# A tick that loses its connection -----------------------------------------------------


@on_postgres
@pytest.mark.django_db(transaction=True)
def test_tick__that_loses_its_connection_ends_as_database_unavailable_error(define, caplog):
    from django_workerflow import tasks

    caplog.set_level(logging.INFO, logger=OUTAGE_LOGGER)

    def execute(self: Any) -> str:
        self.run("cut", terminate_backend_of_this_thread)
        return "done"

    instance = workerflow.start(define(execute), key="cut")

    with pytest.raises(DatabaseUnavailableError) as raised:
        tasks.tick(instance.pk)

    assert isinstance(raised.value, Exception)
    assert str(raised.value).startswith(
        f"The tick of instance {instance.pk} stopped: the database is unavailable ("
    )
    assert "\n" not in str(raised.value)
    assert raised.value.__cause__ is None  # one line in the worker's report, not a chain
    # Nothing more recorded: the step is left to the lease's recovery.
    assert Step.objects.get(instance=instance, step_id="cut").state == StepState.RUNNING
    assert WorkflowInstance.objects.get(pk=instance.pk).lease_token is not None
    assert [level for level, _ in outage_lines(caplog)] == ["WARNING"]


# health -------------------------------------------------------------------------------


def health_without_a_database(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``manage.py workerflow health`` in a process whose database cannot be reached."""
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="tests.settings")
    if ON_POSTGRES:
        env.update(WORKERFLOW_DB="postgres", WORKERFLOW_PG_PORT=str(free_port()))
    else:
        env.update(WORKERFLOW_DB="sqlite", WORKERFLOW_SQLITE_PATH=str(tmp_path / "no" / "db"))
    return subprocess.run(
        [sys.executable, str(REPO / "manage.py"), "workerflow", "health"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.slow  # a Django process of its own
def test_health__without_a_database_says_so_in_one_line_with_exit_status_3(tmp_path):
    probe = health_without_a_database(tmp_path)

    assert probe.returncode == 3
    assert probe.stdout == ""
    (line,) = probe.stderr.splitlines()
    assert line.startswith("CommandError: DATABASE UNAVAILABLE: cannot reach database 'default' (")
    assert line.endswith(
        "The workers wait for it and resume on their own: do not restart them; bring the "
        "database back."
    )


# send_event with an idempotency key ---------------------------------------------------


def waits(self: Any) -> Any:
    return self.wait("approval", "approved", timeout=3600)


@pytest.mark.django_db
def test_send_event__twice_with_one_key__stores_one_event_and_returns_it_twice(define):
    instance = workerflow.start(define(waits), key="approval")

    first = workerflow.send_event("approval", "noted", {"n": 1}, idempotency_key="req-1")
    second = workerflow.send_event("approval", "noted", {"n": 2}, idempotency_key="req-1")

    assert first is not None
    assert second is not None
    assert second.pk == first.pk
    assert second.payload == {"n": 1}
    assert InboundEvent.objects.filter(instance=instance).count() == 1


@pytest.mark.django_db
def test_send_event__other_keys_or_none__are_each_sent(define):
    instance = workerflow.start(define(waits), key="approval")
    other = workerflow.start(define(waits), key="other")

    workerflow.send_event("approval", "noted", idempotency_key="req-1")
    workerflow.send_event("approval", "noted", idempotency_key="req-2")
    workerflow.send_event("approval", "noted")
    workerflow.send_event("approval", "noted")
    workerflow.send_event("other", "noted", idempotency_key="req-1")

    assert InboundEvent.objects.filter(instance=instance).count() == 4
    assert InboundEvent.objects.filter(instance=other).count() == 1


@pytest.mark.django_db
def test_send_event__a_claimed_event_sent_again__returns_the_first_send_claimed(define, harness):
    instance = workerflow.start(define(waits), key="approval")
    harness.drain()

    first = workerflow.send_event("approval", "approved", "yes", idempotency_key="req-1")
    second = workerflow.send_event("approval", "approved", "no", idempotency_key="req-1")

    assert first is not None
    assert first.claimed_by_id is not None
    assert second is not None
    assert (second.pk, second.claimed_by_id) == (first.pk, first.claimed_by_id)
    harness.drain()
    instance.refresh_from_db()
    assert (instance.status, instance.result) == ("completed", "yes")


@pytest.mark.django_db
@pytest.mark.parametrize("key", ["", " ", "x" * 201, 7, "nul\x00"])
def test_send_event__a_bad_idempotency_key__is_refused(define, key):
    workerflow.start(define(waits), key="approval")

    with pytest.raises(WorkflowInputError, match="An idempotency key"):
        workerflow.send_event("approval", "noted", idempotency_key=key)

    assert not InboundEvent.objects.exists()


@pytest.mark.django_db
def test_asend_event__with_one_key_twice__returns_the_first_event(define):
    from asgiref.sync import async_to_sync

    workerflow.start(define(waits), key="approval")

    send = async_to_sync(workerflow.asend_event)
    first = send("approval", "noted", idempotency_key="req-1")
    second = send("approval", "noted", idempotency_key="req-1")

    assert first is not None
    assert second is not None
    assert first.pk == second.pk


@pytest.mark.django_db
def test_cli_send_event__with_one_key_twice__sends_once(define):
    instance = workerflow.start(define(waits), key="approval")
    for _ in range(2):
        call_command(
            "workerflow",
            "send-event",
            "approval",
            "noted",
            "--payload",
            '{"n": 1}',
            "--idempotency-key",
            "cli-1",
            stdout=StringIO(),
        )

    assert InboundEvent.objects.filter(instance=instance).count() == 1


@pytest.mark.django_db
def test_admin_send_event_form__submitted_twice__sends_once(define, admin_client):
    instance = workerflow.start(define(waits), key="approval")
    url = f"/admin/workerflow/workflowinstance/{instance.pk}/send_event/"
    page = admin_client.get(url)
    key = page.context["form"]["idempotency_key"].value()
    assert key

    for _ in range(2):
        response = admin_client.post(
            url, {"event_name": "noted", "payload": "1", "idempotency_key": key}
        )
        assert response.status_code == 302

    assert InboundEvent.objects.filter(instance=instance).count() == 1
    assert admin_client.get(url).context["form"]["idempotency_key"].value() != key
