"""Bell wake-ups on PostgreSQL: a queued bell notifies at commit (never when rolled back),
and the due-first broker waits for notifications instead of polling, with a slow safety-net
poll for lost ones (issue 24).

No assertion here measures a latency: the broker's safety-net interval is set to a minute,
so a test that finishes in seconds was woken by a notification (or a bell's due time).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, connections, transaction
from django.utils import timezone

from django_workerflow.store.bell_channel import CHANNEL, FOLD_SECONDS, BellListener, wake_at

# django-q2 and the broker (which imports it) are imported where used, after this skip.
pytest.importorskip("django_q")

pytestmark = [
    pytest.mark.postgres_only,
    pytest.mark.skipif(
        connection.vendor != "postgresql",
        reason="needs PostgreSQL (WORKERFLOW_DB=postgres): SQLite has no LISTEN/NOTIFY and "
        "its broker polls",
    ),
    pytest.mark.django_db(transaction=True),
]

#: Far longer than any test here may take: reaching it means a wake-up was missed.
SAFETY_NET = 60.0
#: A generous bound on a test woken by a notification (not a latency figure).
WITHIN = 30.0


@pytest.fixture
def listener() -> Iterator[Any]:
    """A second connection LISTENing on the bell channel."""

    other = connections.create_connection("default")
    other.ensure_connection()
    other.set_autocommit(True)
    with other.cursor() as cursor:
        cursor.execute(f"LISTEN {CHANNEL}")
    try:
        yield other
    finally:
        other.close()


@pytest.fixture
def slow_safety_net(settings: Any) -> None:
    settings.WORKERFLOW_BELL_POLL_SECONDS = SAFETY_NET


def received_until_marker(listener: Any) -> list[str]:
    """The queues of the bell notifications ``listener`` receives before a marker sent now
    (a session's notifications arrive in commit order, so anything committed earlier comes
    first); each also names its bells' earliest due time, which must be a time."""
    return [queue for queue, _due in notifications_until_marker(listener)]


def notifications_until_marker(listener: Any) -> list[tuple[str, float]]:
    """The (queue, earliest due time) of each bell notification before a marker sent now."""

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, 'marker')", [CHANNEL])
    received = []
    for notify in listener.connection.notifies(timeout=WITHIN):
        if notify.payload == "marker":
            return received
        queue, _, due = notify.payload.rpartition(" ")
        assert abs(float(due) - time.time()) < WITHIN, notify.payload
        received.append((queue, float(due)))
    raise AssertionError(f"The marker notification did not arrive within {WITHIN} s.")


def queue_key() -> str:
    from django_q.conf import Conf

    return str(Conf.CLUSTER_NAME)


def insert_bell(payload: str, lock: Any, *, notify: bool = True) -> None:
    """A bell row as django-q2 queues one; ``notify=False`` skips the table's triggers (a
    lost notification)."""
    from django_q.models import OrmQ

    with transaction.atomic():
        if not notify:
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL session_replication_role = replica")
        OrmQ.objects.create(key=queue_key(), payload=payload, lock=lock)


def broker() -> Any:
    from django_workerflow.broker import DueFirstOrmBroker

    return DueFirstOrmBroker(list_key=queue_key())


def dequeue_until_taken(queue: Any, seconds: float = WITHIN) -> list[tuple[int, Any]]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        taken = queue.dequeue()
        if taken:
            return list(taken)
    raise AssertionError(f"No bell was handed out within {seconds} s.")


def later(seconds: float, action: Any) -> threading.Thread:
    """Run ``action`` in a thread (its own connection) after ``seconds``."""

    def body() -> None:
        try:
            time.sleep(seconds)
            action()
        finally:
            connection.close()

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread


def test_bell_channel__matches_the_migration_that_sends_on_it():

    migration = __import__("django_workerflow.migrations.0014_bell_notify", fromlist=["CHANNEL"])
    assert migration.CHANNEL == CHANNEL


def test_start__notifies_its_bell_at_commit(listener, define):
    import django_workerflow as workerflow

    workflow = define(lambda self: None)

    workerflow.start(workflow, key="committed")

    assert received_until_marker(listener) == [queue_key()]


def test_start__rolled_back_notifies_nobody(listener, define):
    import django_workerflow as workerflow

    workflow = define(lambda self: None)

    with transaction.atomic():
        workerflow.start(workflow, key="rolled-back")
        transaction.set_rollback(True)

    assert received_until_marker(listener) == []


def test_starts__in_one_transaction_notify_once(listener, define):
    import django_workerflow as workerflow

    workflow = define(lambda self: None)

    with transaction.atomic():
        for number in range(5):
            workerflow.start(workflow, key=f"together-{number}")

    assert received_until_marker(listener) == [queue_key()]


def test_bells__in_one_transaction_notify_again_only_for_an_earlier_due_time(listener):
    now = timezone.now()
    with transaction.atomic():
        insert_bell("in 10 s", now + timedelta(seconds=10))
        insert_bell("in 20 s", now + timedelta(seconds=20))  # later: nothing to announce
        insert_bell("in 5 s", now + timedelta(seconds=5))  # earlier: wakes a listener sooner
        insert_bell("in 7 s", now + timedelta(seconds=7))

    received = notifications_until_marker(listener)

    assert [queue for queue, _due in received] == [queue_key(), queue_key()]
    dues = [due - now.timestamp() for _queue, due in received]
    assert [round(due, 3) for due in dues] == [10.0, 5.0]


def test_bells__a_rolled_back_savepoint_takes_its_announcement_with_it(listener):
    now = timezone.now()
    with transaction.atomic():
        with transaction.atomic():
            insert_bell("rolled back", now)
            transaction.set_rollback(True)
        insert_bell("kept", now + timedelta(seconds=1))

    received = notifications_until_marker(listener)

    assert [round(due - now.timestamp(), 3) for _queue, due in received] == [1.0]


def test_bell_row__committed_notifies_and_rolled_back_does_not(listener):
    with transaction.atomic():
        insert_bell("rolled back", timezone.now())
        transaction.set_rollback(True)
    insert_bell("committed", timezone.now())

    assert received_until_marker(listener) == [queue_key()]


def test_broker__wakes_on_a_notification_long_before_its_safety_net(slow_safety_net):
    queue = broker()
    insert_bell("first", timezone.now())
    assert [payload for _pk, payload in dequeue_until_taken(queue)] == ["first"]
    began = time.monotonic()

    writer = later(0.3, lambda: insert_bell("second", timezone.now()))
    taken = dequeue_until_taken(queue)

    writer.join()
    assert [payload for _pk, payload in taken] == ["second"]
    assert time.monotonic() - began < WITHIN < SAFETY_NET


def test_broker__hands_out_a_delayed_bell_at_its_due_time_not_before(slow_safety_net):
    queue = broker()
    due = timezone.now() + timedelta(seconds=1.5)
    insert_bell("delayed", due)

    taken = dequeue_until_taken(queue)

    assert timezone.now() >= due
    assert [payload for _pk, payload in taken] == ["delayed"]


def test_broker__picks_up_a_bell_without_notification_at_its_safety_net_poll(settings):
    settings.WORKERFLOW_BELL_POLL_SECONDS = 0.5
    queue = broker()
    insert_bell("first", timezone.now())
    dequeue_until_taken(queue)

    writer = later(0.3, lambda: insert_bell("silent", timezone.now(), notify=False))
    taken = dequeue_until_taken(queue)

    writer.join()
    assert [payload for _pk, payload in taken] == ["silent"]


def test_broker__claims_once_for_a_bell_due_just_after_its_safety_net_poll(settings):
    # A sweeper link queued a poll interval after the previous link's claim: the poll and
    # the link's due time nearly coincide, and one claim serves both.
    settings.WORKERFLOW_BELL_POLL_SECONDS = 1.0
    queue = broker()
    insert_bell("first", timezone.now())
    dequeue_until_taken(queue)
    due = timezone.now() + timedelta(seconds=1.3)

    writer = later(0.2, lambda: insert_bell("link", due))
    taken = queue.dequeue()

    writer.join()
    assert timezone.now() >= due
    assert [payload for _pk, payload in taken or []] == ["link"]


def test_bell_channel__a_poll_waits_only_for_a_bell_due_just_after_it():

    assert wake_at(100.0, None) == 100.0
    assert wake_at(100.0, 90.0) == 90.0
    assert wake_at(100.0, 100.0 + FOLD_SECONDS) == 100.0 + FOLD_SECONDS
    assert wake_at(100.0, 100.5 + FOLD_SECONDS) == 100.0


def test_broker__listens_again_after_its_connection_was_closed(slow_safety_net):
    from django_q.conf import Conf

    queue = broker()
    insert_bell("first", timezone.now())
    dequeue_until_taken(queue)
    connections[Conf.ORM].close()
    insert_bell("second", timezone.now())
    dequeue_until_taken(queue)  # reconnects, listens again
    with connections[Conf.ORM].cursor() as cursor:
        cursor.execute("SELECT pg_listening_channels()")
        assert [row[0] for row in cursor.fetchall()] == [CHANNEL]

    writer = later(0.3, lambda: insert_bell("third", timezone.now()))
    taken = dequeue_until_taken(queue)

    writer.join()
    assert [payload for _pk, payload in taken] == ["third"]


def test_broker__a_delayed_bell_queued_while_it_waits_comes_out_at_its_due_time(
    slow_safety_net,
):
    queue = broker()
    assert queue.dequeue() is None  # an empty queue: the next call waits (a minute at most)
    due = timezone.now() + timedelta(seconds=1.5)

    writer = later(0.3, lambda: insert_bell("delayed", due))
    taken = dequeue_until_taken(queue)

    writer.join()
    assert timezone.now() >= due
    assert [payload for _pk, payload in taken] == ["delayed"]


def test_bell_listener__does_not_listen_inside_a_transaction():

    with transaction.atomic():
        # Notifications would wait for the end of a transaction the broker never ends.
        assert BellListener().listen(connection) is False


def test_broker__polls_and_says_so_once_when_its_notifications_never_arrive(
    monkeypatch, caplog, slow_safety_net
):
    # Behind a transaction-pooling proxy the probe sent after LISTEN never comes back.
    monkeypatch.setattr(BellListener, "_probe_returns", staticmethod(lambda *_args: False))
    queue = broker()

    with caplog.at_level("WARNING", logger="django_workerflow.store.bell_channel"):
        assert queue.dequeue() is None  # polled: a sleep of Conf.POLL, not the safety net
        connection.close()
        insert_bell("polled", timezone.now())
        taken = dequeue_until_taken(queue)

    assert [payload for _pk, payload in taken] == ["polled"]
    warnings = [r for r in caplog.records if "do not reach database alias" in r.getMessage()]
    assert len(warnings) == 1


def claims_sent(queue: Any) -> list[str]:
    """The bell claims ``queue.dequeue()`` sends, with a due bell queued."""
    insert_bell("due", timezone.now())
    sent: list[str] = []

    def record(execute, sql, params, many, context):
        if "FOR UPDATE SKIP LOCKED" in sql:
            sent.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        assert [payload for _pk, payload in queue.dequeue() or []] == ["due"]
    return sent


def test_broker__claims_bells_without_waiting_for_the_wal_flush():
    # A claim a server crash loses leaves its bells due, and a tick is safe to repeat.
    [claim] = claims_sent(broker())

    assert "set_config('synchronous_commit', 'off', true)" in claim


def test_broker__claiming_inside_a_transaction_keeps_its_synchronous_commit():
    with transaction.atomic():
        [claim] = claims_sent(broker())
        with connection.cursor() as cursor:
            cursor.execute("SHOW synchronous_commit")
            assert cursor.fetchone()[0] == "on"

    assert "synchronous_commit" not in claim


def test_broker__the_claim_without_flush_turns_it_off_for_its_own_transaction_only():
    from django_workerflow.store import sql

    statement = sql.queue_statement("claim_due_bells_no_flush", "django_q_ormq")
    values = {"key": queue_key(), "now": timezone.now(), "until": timezone.now(), "limit": 1}
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(statement, values)
        cursor.execute("SHOW synchronous_commit")
        assert cursor.fetchone()[0] == "off"
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        assert cursor.fetchone()[0] == "on"
