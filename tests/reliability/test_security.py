"""Security: permissions checked on the server for every POST, CSRF enforced, JSON (never
pickle) in our tables, hostile strings round-trip and render escaped, payloads kept out of
the logs unless asked for.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.db import connection
from django.test import Client
from django.urls import reverse
from picklefield.fields import PickledObjectField

import django_workerflow as workerflow
from django_workerflow import NonRetryableStepError
from django_workerflow.models import (
    InboundEvent,
    JSONTextField,
    Step,
    WorkflowInstance,
    WorkflowStatus,
)
from django_workerflow.workers import bells
from tests.support.admin import staff_client

from .conftest import ENGINE_MODELS, print_figures, table_counts

pytestmark = [pytest.mark.reliability, pytest.mark.django_db]

SCRIPT = "<script>alert(1)</script>"
IMG = "\"'><img src=x onerror=alert(1)>"
SQL = "'; DROP TABLE workerflow_step; --"
HOSTILE = (SCRIPT, IMG, SQL)
# What must never appear raw in a page, and the escaped form that shows it was rendered.
RAW_MARKUP = ("<script>alert(1)", "<img src=x onerror")
ESCAPED_SCRIPT = "&lt;script&gt;alert(1)&lt;/script&gt;"
ESCAPED_IMG = "&lt;img src=x onerror=alert(1)&gt;"


# Fixtures ---------------------------------------------------------------------------------


def waits_for_go(self):
    self.run("prepare", lambda: "ready")
    return self.wait("go", "go")


@pytest.fixture
def instances(define, workerflow_harness) -> dict[str, WorkflowInstance]:
    """A running instance waiting for 'go', a paused one and a completed one."""
    definition = define(waits_for_go, name="guarded")
    for key in ("running-1", "paused-1", "completed-1"):
        workerflow.start(definition, key=key)
    workerflow_harness.drain()
    workerflow.pause("paused-1")
    workerflow.send_event("completed-1", "go", {"done": True})
    workerflow_harness.drain()
    found = {instance.key: instance for instance in WorkflowInstance.objects.all()}
    assert found["running-1"].status == WorkflowStatus.RUNNING
    assert found["paused-1"].status == WorkflowStatus.PAUSED
    assert found["completed-1"].status == WorkflowStatus.COMPLETED
    return found


EVERY_PERMISSION = (
    "view_workflowinstance",
    "delete_workflowinstance",
    "pause_workflowinstance",
    "resume_workflowinstance",
    "cancel_workflowinstance",
    "send_event_workflowinstance",
)


def snapshot() -> tuple[Any, ...]:
    """Every engine row count, every instance row, and the admin history."""
    rows = tuple(WorkflowInstance.objects.order_by("pk").values_list())
    return table_counts(), rows, LogEntry.objects.count()


# The controls -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Control:
    """One state-changing POST the admin accepts, and the permission it needs."""

    name: str
    permission: str
    target: str  # key of the instance it acts on
    view: str | None = None  # per-instance view name, or None for a change-list action
    action: str | None = None
    data: tuple[tuple[str, str], ...] = ()

    def url(self, instance: WorkflowInstance) -> str:
        if self.view is not None:
            return reverse(f"admin:workerflow_workflowinstance_{self.view}", args=[instance.pk])
        return reverse("admin:workerflow_workflowinstance_changelist")

    def post(self, client: Client, instance: WorkflowInstance, **extra: str) -> Any:
        data: dict[str, Any] = dict(self.data)
        if self.action is not None:
            data.update(action=self.action, index="0", _selected_action=[str(instance.pk)])
        data.update(extra)
        return client.post(self.url(instance), data)


CONTROLS = [
    Control("pause button", "pause", "running-1", view="pause"),
    Control("resume button", "resume", "paused-1", view="resume"),
    Control("wake button", "resume", "running-1", view="wake"),
    Control("cancel page", "cancel", "running-1", view="cancel", data=(("reason", "r"),)),
    Control(
        "send event page",
        "send_event",
        "running-1",
        view="send_event",
        data=(("event_name", "go"), ("payload", '{"a": 1}')),
    ),
    Control("pause action", "pause", "running-1", action="pause_selected"),
    Control("resume action", "resume", "paused-1", action="resume_selected"),
    Control("wake action", "resume", "running-1", action="wake_now"),
    Control(
        "cancel action",
        "cancel",
        "running-1",
        action="cancel_selected",
        data=(("apply", "1"), ("reason", "r")),
    ),
    Control(
        "send event action",
        "send_event",
        "running-1",
        action="send_event",
        data=(("apply", "1"), ("event_name", "go"), ("payload", '{"a": 1}')),
    ),
    Control(
        "delete action", "delete", "completed-1", action="delete_selected", data=(("post", "yes"),)
    ),
    Control(
        "delete page",
        "delete",
        "completed-1",
        view="delete",
        data=(("post", "yes"),),
    ),
]
CONTROL_IDS = [control.name for control in CONTROLS]


def assert_refused(response: Any, before: tuple[Any, ...]) -> None:
    assert response.status_code == 403, response.status_code
    assert snapshot() == before


def assert_sent_to_login(response: Any, before: tuple[Any, ...]) -> None:
    assert response.status_code == 302, response.status_code
    assert "/login/" in response["Location"]
    assert snapshot() == before


# Permissions ----------------------------------------------------------------------------------


@pytest.mark.parametrize("control", CONTROLS, ids=CONTROL_IDS)
def test_admin_post__without_its_permission_is_refused_and_changes_nothing(instances, control):
    # Everything but the one permission the control needs: each is checked on its own.
    others = [p for p in EVERY_PERMISSION if p != f"{control.permission}_workflowinstance"]
    client = staff_client(*others)
    before = snapshot()

    assert_refused(control.post(client, instances[control.target]), before)


@pytest.mark.parametrize("control", CONTROLS, ids=CONTROL_IDS)
def test_admin_post__by_staff_with_no_permission_is_refused_and_changes_nothing(instances, control):
    client = staff_client()
    before = snapshot()

    assert_refused(control.post(client, instances[control.target]), before)


@pytest.mark.parametrize("control", CONTROLS, ids=CONTROL_IDS)
def test_admin_post__by_a_user_who_is_not_staff_changes_nothing(instances, control):
    client = staff_client(*EVERY_PERMISSION, staff=False)
    before = snapshot()

    assert_sent_to_login(control.post(client, instances[control.target]), before)


@pytest.mark.parametrize("control", CONTROLS, ids=CONTROL_IDS)
def test_admin_post__anonymous_changes_nothing(instances, control):
    before = snapshot()

    assert_sent_to_login(control.post(Client(), instances[control.target]), before)


@pytest.mark.parametrize("control", CONTROLS, ids=CONTROL_IDS)
def test_admin_post__with_view_and_its_permission_takes_effect(instances, control):
    """The positive control: the refusals above are not refusals of everything."""
    client = staff_client("view_workflowinstance", f"{control.permission}_workflowinstance")
    before = snapshot()

    response = control.post(client, instances[control.target])

    assert response.status_code == 302, response.status_code
    assert snapshot() != before


@pytest.mark.parametrize("view", ["pause", "resume", "wake", "cancel", "send_event"])
def test_admin_get__never_changes_state(admin_client, instances, view):
    for key in ("running-1", "paused-1"):
        url = reverse(f"admin:workerflow_workflowinstance_{view}", args=[instances[key].pk])
        before = snapshot()

        response = admin_client.get(url, {"reason": "r", "event_name": "go", "payload": "1"})

        assert response.status_code in (200, 405), response.status_code
        assert snapshot() == before


# CSRF -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("control", CONTROLS, ids=CONTROL_IDS)
def test_admin_post__without_a_csrf_token_is_refused_and_changes_nothing(instances, control):
    client = staff_client(*EVERY_PERMISSION, enforce_csrf=True)
    before = snapshot()

    response = control.post(client, instances[control.target])

    assert response.status_code == 403, response.status_code
    assert b"CSRF" in response.content
    assert snapshot() == before


@pytest.mark.parametrize("control", CONTROLS, ids=CONTROL_IDS)
def test_admin_post__with_a_wrong_csrf_token_is_refused(instances, control):
    client = staff_client(*EVERY_PERMISSION, enforce_csrf=True)
    client.get(reverse("admin:workerflow_workflowinstance_changelist"))  # sets the cookie
    before = snapshot()

    response = control.post(client, instances[control.target], csrfmiddlewaretoken="x" * 64)

    assert response.status_code == 403, response.status_code
    assert snapshot() == before


def test_admin_post__with_the_csrf_token_takes_effect(instances):
    client = staff_client(*EVERY_PERMISSION, enforce_csrf=True)
    instance = instances["running-1"]
    page = client.get(reverse("admin:workerflow_workflowinstance_change", args=[instance.pk]))
    token = page.context["csrf_token"]

    response = CONTROLS[0].post(client, instance, csrfmiddlewaretoken=str(token))

    assert response.status_code == 302
    instance.refresh_from_db()
    assert instance.status == WorkflowStatus.PAUSED


# Hostile strings ----------------------------------------------------------------------------


def hostile_workflow(self):
    """Hostile step ids, results (keys too), event names and payloads, then a result."""
    results = [self.run(f"run {text}", lambda text=text: {text: [text]}) for text in HOSTILE]
    received = [self.wait(f"wait {text}", f"event {text}") for text in HOSTILE]
    return {"input": self.input, "results": results, "received": received}


def failing_hostile_workflow(self):
    def refuse() -> None:
        raise NonRetryableStepError(IMG + SQL)

    self.run(f"fail {SCRIPT}", refuse)


@pytest.fixture
def hostile(define, workerflow_harness) -> dict[str, WorkflowInstance]:
    """Instances full of hostile strings: completed, waiting, failed and cancelled."""
    harness = workerflow_harness
    definition = define(hostile_workflow, name=f"evil {SCRIPT}", version=f"v {IMG}")
    failing = define(failing_hostile_workflow, name=f"failing {SQL}")
    keys = {
        "done": f"done {SCRIPT}",
        "waiting": f"waiting {IMG}",
        "failed": f"failed {SQL}",
        "cancelled": f"cancelled {IMG}",
    }
    for name in ("done", "waiting", "cancelled"):
        workerflow.start(definition, key=keys[name], input={"html": SCRIPT, SQL: IMG})
    workerflow.start(failing, key=keys["failed"], input=SQL)
    harness.drain()
    for text in HOSTILE:
        workerflow.send_event(keys["done"], f"event {text}", {"payload": text, text: SQL})
    workerflow.send_event(keys["waiting"], f"event {SQL}", {"queued": SCRIPT})
    workerflow.cancel(keys["cancelled"], reason=f"reason {SCRIPT}")
    harness.drain()
    return {name: WorkflowInstance.objects.get(key=key) for name, key in keys.items()}


def test_hostile_strings__round_trip_unchanged_and_the_tables_survive(hostile):
    done = hostile["done"]

    assert done.status == WorkflowStatus.COMPLETED
    assert done.input == {"html": SCRIPT, SQL: IMG}
    assert done.result == {
        "input": {"html": SCRIPT, SQL: IMG},
        "results": [{text: [text]} for text in HOSTILE],
        "received": [{"payload": text, text: SQL} for text in HOSTILE],
    }
    step_ids = set(Step.objects.filter(instance=done).values_list("step_id", flat=True))
    assert step_ids == {f"run {t}" for t in HOSTILE} | {f"wait {t}" for t in HOSTILE}
    names = set(InboundEvent.objects.filter(instance=done).values_list("event_name", flat=True))
    assert names == {f"event {t}" for t in HOSTILE}
    assert hostile["failed"].status == WorkflowStatus.FAILED
    assert IMG + SQL in hostile["failed"].error_message
    queued = InboundEvent.objects.get(instance=hostile["waiting"], event_name=f"event {SQL}")
    assert queued.payload == {"queued": SCRIPT}
    tables = set(connection.introspection.table_names(include_views=True))
    assert {model._meta.db_table for model in ENGINE_MODELS} <= tables
    assert all(count > 0 for count in table_counts().values())


def test_hostile_strings__render_escaped_in_the_admin(admin_client, hostile):
    pages = {
        "change list": reverse("admin:workerflow_workflowinstance_changelist"),
        "search": reverse("admin:workerflow_workflowinstance_changelist") + "?q=" + SCRIPT,
        "sql search": reverse("admin:workerflow_workflowinstance_changelist") + "?q=" + SQL,
    }
    for name, instance in hostile.items():
        pages[f"{name} page"] = reverse(
            "admin:workerflow_workflowinstance_change", args=[instance.pk]
        )
        pages[f"{name} history"] = reverse(
            "admin:workerflow_workflowinstance_history", args=[instance.pk]
        )
    pages["send event form"] = reverse(
        "admin:workerflow_workflowinstance_send_event", args=[hostile["waiting"].pk]
    )

    checked = 0
    for name, url in pages.items():
        response = admin_client.get(url)
        assert response.status_code == 200, (name, response.status_code)
        body = response.content.decode()
        for raw in RAW_MARKUP:
            assert raw not in body, f"raw {raw!r} in the {name}"
        checked += 1
    listing = admin_client.get(pages["change list"]).content.decode()
    assert ESCAPED_SCRIPT in listing
    assert ESCAPED_IMG in listing
    done_page = admin_client.get(pages["done page"]).content.decode()
    assert done_page.count(ESCAPED_SCRIPT) >= 4
    assert ESCAPED_IMG in done_page
    failed_page = admin_client.get(pages["failed page"]).content.decode()
    assert ESCAPED_IMG in failed_page
    print_figures("hostile rendering", admin_pages_checked=checked)


def test_hostile_strings__in_admin_actions_render_escaped_in_messages_and_forms(
    admin_client, hostile
):
    waiting = hostile["waiting"]
    changelist = reverse("admin:workerflow_workflowinstance_changelist")

    sent = admin_client.post(
        changelist,
        {
            "action": "send_event",
            "index": "0",
            "_selected_action": [str(waiting.pk)],
            "apply": "1",
            "event_name": f"event {SCRIPT}",
            "payload": json.dumps({"html": IMG}),
        },
        follow=True,
    )
    confirm = admin_client.post(
        changelist,
        {"action": "cancel_selected", "index": "0", "_selected_action": [str(waiting.pk)]},
    )
    history = admin_client.get(
        reverse("admin:workerflow_workflowinstance_history", args=[waiting.pk])
    )

    for response in (sent, confirm, history):
        assert response.status_code == 200
        body = response.content.decode()
        for raw in RAW_MARKUP:
            assert raw not in body
    assert ESCAPED_SCRIPT in sent.content.decode()
    assert ESCAPED_IMG in confirm.content.decode()  # the key of the selected instance
    claimed = InboundEvent.objects.get(instance=waiting, event_name=f"event {SCRIPT}")
    assert claimed.payload == {"html": IMG}
    assert claimed.claimed_by.step_id == f"wait {SCRIPT}"


# JSON, never pickle --------------------------------------------------------------------------


def json_columns() -> list[tuple[str, str]]:
    """(table, column) of every JSON field of the engine's models."""
    return [
        (model._meta.db_table, field.column)
        for model in ENGINE_MODELS
        for field in model._meta.concrete_fields
        if isinstance(field, JSONTextField)
    ]


def test_storage__engine_fields_are_json_text_and_never_pickled():
    for model in ENGINE_MODELS:
        for field in model._meta.concrete_fields:
            assert not isinstance(field, PickledObjectField), field
            if isinstance(field, JSONTextField):
                assert field.db_type(connection) == "text", field


def test_storage__every_stored_json_value_is_json_text(hostile):
    parsed = 0
    with connection.cursor() as cursor:
        for table, column in json_columns():
            cursor.execute(f"SELECT {column} FROM {table} WHERE {column} IS NOT NULL")
            for (raw,) in cursor.fetchall():
                assert isinstance(raw, str), (table, column, type(raw))
                json.loads(raw)
                parsed += 1
        # Hostile text is stored as plain JSON text: nothing escaped away or encoded.
        cursor.execute(
            f"SELECT input FROM {WorkflowInstance._meta.db_table} WHERE id = %s",
            [hostile["done"].pk],
        )
        (stored,) = cursor.fetchone()
    assert json.loads(stored) == {"html": SCRIPT, SQL: IMG}
    assert SCRIPT in stored
    assert SQL in stored
    assert parsed > 20
    print_figures("json storage", json_columns=len(json_columns()), stored_values_parsed=parsed)


def test_storage__bells_carry_only_the_instance_pk_never_user_data(define):
    """django-q2 pickles its tasks: what we queue there must hold no input or payload."""
    from django_q.models import OrmQ
    from django_q.signing import SignedPackage

    if not bells.uses_delayed_bells():
        pytest.skip("bells are queued in the database only with django-q2's ORM broker")
    instance = workerflow.start(define(waits_for_go), key="belled", input={"secret": SCRIPT})
    workerflow.send_event(instance, "go", {"secret": IMG})

    tasks = [
        SignedPackage.loads(payload) for payload in OrmQ.objects.values_list("payload", flat=True)
    ]

    assert tasks, "no bell was queued"
    for task in tasks:
        assert task["func"] == bells.TICK_TASK
        assert tuple(task["args"]) == (instance.pk,)
        assert not task.get("kwargs")
        assert "secret" not in repr(task)


# Logs -------------------------------------------------------------------------------------------

MARKER = "payload-marker-7f3a91"


class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info:
            text += logging.Formatter().formatException(record.exc_info)
        self.lines.append(f"{record.name} {record.levelname} {text}")


@pytest.fixture
def engine_logs() -> Iterator[Capture]:
    """Every record of every ``django_workerflow`` logger, DEBUG included."""
    logger = logging.getLogger("django_workerflow")
    capture = Capture()
    previous = logger.level
    logger.addHandler(capture)
    logger.setLevel(logging.DEBUG)
    yield capture
    logger.removeHandler(capture)
    logger.setLevel(previous)


def marked_workflow(self):
    value = self.run("fetch", lambda: {"fetched": MARKER})
    reply = self.wait("reply", "reply")
    self.run("fail-once", flaky_with_marker(self.key), max_attempts=2, backoff=lambda n: 0)
    return {"value": value, "reply": reply, "input": self.input, "marker": MARKER}


_flaky_seen: set[str] = set()


def flaky_with_marker(key: str) -> Callable[[], str]:
    def call() -> str:
        if key not in _flaky_seen:
            _flaky_seen.add(key)
            raise RuntimeError("transient")
        return MARKER

    return call


def run_marked(define, harness, key: str) -> WorkflowInstance:
    instance = workerflow.start(define(marked_workflow), key=key, input={"secret": MARKER})
    harness.drain()
    workerflow.send_event(instance, "reply", {"secret": MARKER})
    workerflow.send_event(instance, "unclaimed", {"secret": MARKER})
    harness.drain()
    harness.advance(1)
    instance.refresh_from_db()
    assert instance.status == WorkflowStatus.COMPLETED
    return instance


def test_logs__never_include_payloads_by_default(define, workerflow_harness, engine_logs):
    run_marked(define, workerflow_harness, "logged-1")

    assert len(engine_logs.lines) >= 3, engine_logs.lines
    leaks = [line for line in engine_logs.lines if MARKER in line]
    assert not leaks, leaks
    print_figures("log capture", records=len(engine_logs.lines), payload_leaks=len(leaks))


def test_logs__include_payloads_when_configured(define, workerflow_harness, engine_logs, settings):
    settings.WORKERFLOW_LOG_PAYLOADS = True

    run_marked(define, workerflow_harness, "logged-2")

    assert any(MARKER in line for line in engine_logs.lines), engine_logs.lines
