"""`make demo`'s tour (testproject/demoapp, installed by the demo only): an invoice that fails
until its partner is back, then retries; a handover queued behind another for the same
warehouse; a schedule that fires every minute; a partner sync held by its paused definition
until it is resumed; a reindex started three times that runs once; a carrier label whose
first fetch hangs until its step timeout interrupts it, then is retried. And what
testproject/demo.py seeds and prints, without starting its worker or web server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import django_workerflow as workerflow
from django_workerflow import StepTimeoutError
from django_workerflow.models import DefinitionPause, Step, WorkflowInstance
from django_workerflow.testing import Harness
from testproject import demo

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 12, 1, 20, 0, 30, tzinfo=UTC)


def test_tour__the_invoice_fails_until_its_partner_is_back_then_a_retry_completes(
    demo_tour, monkeypatch
):
    with Harness(start=T0) as harness:
        # The partner's clock is the wall clock (user code); here, the harness's.
        monkeypatch.setattr(demo_tour.timezone, "now", harness.now)
        up_at = (T0 + timedelta(minutes=1)).isoformat()
        invoice = workerflow.start(
            "demo-invoice", key="invoice-1", input={"order_number": "ORD-1", "partner_up_at": up_at}
        )
        harness.drain()
        harness.advance(timedelta(seconds=5))  # the retries' backoffs
        invoice.refresh_from_db()
        assert invoice.status == "failed"
        step = invoice.steps.get(step_id="send-invoice")
        assert "invoicing partner unavailable for ORD-1" in step.error_message
        harness.advance(timedelta(minutes=1))
        workerflow.retry(invoice)
        harness.drain()
        invoice.refresh_from_db()
        assert invoice.status == "completed"
        assert invoice.result == {"invoice": "INV-1"}


def test_tour__the_second_handover_of_a_warehouse_is_queued_behind_the_first(demo_tour):
    with Harness(start=T0) as harness:
        for turn in ("first", "queued"):
            workerflow.start(
                "demo-warehouse-handover",
                key=f"handover-{turn}",
                input={"warehouse": "paris-1", "batch": turn},
            )
        harness.drain()
        queued = WorkflowInstance.objects.get(key="handover-queued")
        assert (queued.status, queued.admitted_at) == ("pending", None)
        first = workerflow.wait_progress("handover-first")
        assert (first.fraction, first.message) == (
            0.5,
            "pick list printed; waiting for the warehouse",
        )
        workerflow.send_event("handover-first", "warehouse.handed-over", {"by": "you"})
        harness.drain()
        assert WorkflowInstance.objects.get(key="handover-first").progress.fraction == 1.0
        queued.refresh_from_db()
        assert queued.admitted_at is not None
        assert queued.status == "running"  # now waiting for its own handover


def test_tour__the_minute_schedule_fires_every_minute(demo_tour):
    with Harness(start=T0, schedules=["demo-minute-count"]) as harness:
        harness.advance(timedelta(minutes=3))
    keys = sorted(
        WorkflowInstance.objects.filter(definition_name="demo-minute-count").values_list(
            "key", flat=True
        )
    )
    assert keys == [
        "demo-minute-count@2026-12-01T20:01:00+00:00",
        "demo-minute-count@2026-12-01T20:02:00+00:00",
        "demo-minute-count@2026-12-01T20:03:00+00:00",
    ]


def test_demo__seeds_a_failed_invoice_a_queued_handover_and_one_showing_progress(
    demo_tour, monkeypatch
):
    with Harness(start=T0) as harness:
        monkeypatch.setattr(demo_tour.timezone, "now", harness.now)
        orders = demo.place_example_orders()
        seeded = demo.start_tour()
        harness.drain()
        harness.advance(timedelta(seconds=5))  # the invoice's retries fail too
        status = dict(WorkflowInstance.objects.values_list("key", "status"))
        assert status[seeded.failed] == "failed"
        assert seeded.partner_up_at == "20:01:30 UTC"
        queued = WorkflowInstance.objects.get(key=seeded.queued)
        assert (queued.status, queued.admitted_at) == ("pending", None)
        progress = WorkflowInstance.objects.get(key=seeded.first).progress
        assert (progress.fraction, progress.message) == (
            0.5,
            "pick list printed; waiting for the warehouse",
        )
        # The example orders, one workflow each: paid, unpaid, cancelled, in three parcels.
        assert [number.split("-")[0] for number in orders] == ["PAI", "UNP", "CAN", "PAR"]
        assert status[f"order-{orders[2]}"] == "cancelled"
        assert {f"order-{number}" for number in orders} <= set(status)
        # The orders carry attributes the admin filters by: the start's customer and region,
        # the stage the workflow sets.
        paid = WorkflowInstance.objects.get(key=f"order-{orders[0]}")
        assert paid.attributes == {
            "customer": "paid@example.com",
            "region": "eu",
            "stage": "charged",
        }
        in_europe = WorkflowInstance.objects.filter(attributes__region="eu")
        assert {i.key for i in in_europe} == {f"order-{orders[0]}", f"order-{orders[2]}"}


def test_demo__holds_the_partner_syncs_of_its_paused_definition_until_it_is_resumed(
    demo_tour, monkeypatch
):
    with Harness(start=T0) as harness:
        monkeypatch.setattr(demo_tour.timezone, "now", harness.now)
        seeded = demo.start_tour()
        pause = DefinitionPause.objects.get(definition_name=demo.PAUSED)
        assert (pause.reason, pause.paused_by) == ("partner API down (demo)", "demo")
        ticks = harness.drain() + harness.advance(timedelta(minutes=2))
        held = WorkflowInstance.objects.filter(key__in=seeded.held)
        assert len(seeded.held) == 2
        assert sorted(held.values_list("status", flat=True)) == ["pending", "pending"]
        assert not Step.objects.filter(instance__in=held).exists()
        assert ticks > 0  # the harness ran the tour's other instances meanwhile

        assert workerflow.resume_definition(demo.PAUSED, actor="you") is True
        harness.drain()
        assert dict(held.values_list("key", "status")) == dict.fromkeys(seeded.held, "completed")
        first = WorkflowInstance.objects.get(key=seeded.held[0])
        assert first.result == {"synced": first.input["order_number"]}


def test_demo__the_reindex_started_three_times_runs_once_with_the_last_title(
    demo_tour, monkeypatch
):
    with Harness(start=T0) as harness:
        monkeypatch.setattr(demo_tour.timezone, "now", harness.now)
        seeded = demo.start_tour()
        harness.drain()
        reindex = WorkflowInstance.objects.get(key=seeded.debounced)
        assert reindex.status == "pending"  # its debounce has not passed
        harness.advance(timedelta(seconds=5))
        reindex.refresh_from_db()
        assert WorkflowInstance.objects.filter(definition_name="demo-search-reindex").count() == 1
        assert reindex.status == "completed"
        assert reindex.result == {"indexed": "Blue mug, 350 ml, dishwasher-safe"}
        assert list(reindex.steps.values_list("step_id", "attempt_count")) == [("reindex", 1)]


def test_demo__the_carrier_labels_first_fetch_times_out_and_its_retry_completes(
    demo_tour, monkeypatch
):
    with Harness(start=T0) as harness:
        monkeypatch.setattr(demo_tour.timezone, "now", harness.now)
        seeded = demo.start_tour()
        harness.drain()  # the first fetch hangs: its 1 s timeout interrupts it (real time)
        label = WorkflowInstance.objects.get(key=seeded.timed_out)
        assert label.status == "running"  # its retry is 3 s away
        failed = label.step_events.get(step__step_id="fetch-label", type="attempt_failed")
        assert (failed.attempt_number, failed.error_name) == (1, StepTimeoutError.__name__)
        assert failed.error_message.startswith(
            "StepTimeoutError: Run step 'fetch-label' ran longer than its timeout of 1 s and "
            "was interrupted."
        )
        harness.advance(timedelta(seconds=3))
        label.refresh_from_db()
        assert label.status == "completed"
        parcel = label.input["parcel"]
        assert label.result == {"label": f"https://carrier.example/labels/{parcel}.pdf"}
        fetch = label.steps.get(step_id="fetch-label")
        assert (fetch.state, fetch.attempt_count) == ("succeeded", 2)


def test_demo__prints_the_admin_url_the_login_and_what_it_seeded():
    seeded = demo.Tour(
        failed="invoice-AB12",
        partner_up_at="20:01:30 UTC",
        first="handover-AB12-first",
        queued="handover-AB12-queued",
        held=("sync-AB12-1", "sync-AB12-2"),
        debounced="reindex-AB12",
        timed_out="label-AB12",
    )
    seen = [
        "http://127.0.0.1:8123/admin/workerflow/workflowinstance/",
        "admin / s3cret",
        "invoice-AB12",
        "Retry",
        "Fork",
        "handover-AB12-queued",
        "progress bar",
        "handover-AB12-first",
        "demo-minute-count",
        "every minute",
        "sync-AB12-1",
        "sync-AB12-2",
        "http://127.0.0.1:8123/admin/workerflow/workflowinstance/definitions/",
        "reindex-AB12",
        "three times",
        "label-AB12",
        "1 s step timeout",
    ]
    banner = demo.banner(8123, "s3cret", ["PAI-1", "PAR-2"], seeded)
    reminder = demo.reminder(8123, "s3cret", seeded)
    assert [phrase for phrase in seen if phrase not in banner] == []
    assert [phrase for phrase in seen if phrase not in reminder] == []
    assert "Example orders: PAI-1, PAR-2." in banner
    assert "- queued behind a concurrency limit: handover-AB12-queued\n" in reminder
    assert (
        "- showing its progress bar (1 of 2, waiting for the warehouse): handover-AB12-first\n"
        in reminder
    )
    assert (
        '- demo-partner-sync is paused ("partner API down (demo)", by demo): sync-AB12-1 and\n'
        "    sync-AB12-2 wait, pending. Press its Resume on the Definitions page,\n"
        "    http://127.0.0.1:8123/admin/workerflow/workflowinstance/definitions/\n"
        "    (or run `manage.py workerflow resume-definition demo-partner-sync`): they complete.\n"
    ) in banner
    assert (
        "- held by their paused definition, demo-partner-sync: sync-AB12-1, sync-AB12-2\n"
        "    Resume it on http://127.0.0.1:8123/admin/workerflow/workflowinstance/definitions/\n"
    ) in reminder
    assert (
        "- label-AB12 fetches a label from a carrier that never answers its first request:\n"
        "    its 1 s step timeout interrupts it, and its page shows that attempt failed with\n"
        "    StepTimeoutError; the retry 3 s later gets the label and the instance completes.\n"
    ) in banner


def test_demo__waits_for_the_invoice_to_fail_while_the_worker_runs(demo_tour, monkeypatch):
    with Harness(start=T0) as harness:
        monkeypatch.setattr(demo_tour.timezone, "now", harness.now)
        seeded = demo.start_tour()
        assert demo.wait_for_failure(seeded.failed, worker_running=lambda: False) is False
        harness.drain()
        harness.advance(timedelta(seconds=5))
        assert demo.wait_for_failure(seeded.failed, worker_running=lambda: True) is True


def test_demo__seeds_a_newsletter_the_current_code_cannot_replay(demo_tour, monkeypatch):
    with Harness(start=T0) as harness:
        monkeypatch.setattr(demo_tour.timezone, "now", harness.now)
        seeded = demo.start_tour()
        harness.drain()
        newsletter = WorkflowInstance.objects.get(key=seeded.stranded)
        assert newsletter.status == "running"  # asleep for a week, recorded by older code
        assert list(newsletter.steps.values_list("step_id", flat=True)) == [
            "subscribe",
            "welcome",
            "wait-a-week",
        ]
        verdict = workerflow.replay_verdict(newsletter)
        assert not verdict.ok
        assert "the new step 'send-welcome' where its history recorded 'welcome'" in verdict.reason
        assert workerflow.replay_verdict(seeded.failed).ok


def test_demo__the_card_payment_shows_its_card_number_masked_to_the_support_login(
    demo_tour, monkeypatch, client
):
    from io import StringIO

    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.urls import reverse

    with Harness(start=T0) as harness:
        monkeypatch.setattr(demo_tour.timezone, "now", harness.now)
        seeded = demo.start_tour()
        harness.drain()
    payment = WorkflowInstance.objects.get(key=seeded.card_payment)
    assert payment.status == "completed"
    assert payment.input["card"]["number"] == demo.DEMO_CARD  # stored as it was given
    demo.reset_support_login("s3cret")
    client.force_login(get_user_model().objects.get(username="support"))
    page = client.get(reverse("admin:workerflow_workflowinstance_change", args=[payment.pk]))
    assert demo.DEMO_CARD not in page.content.decode()
    assert "••••" in page.content.decode()
    out = StringIO()
    call_command("workerflow", "show", payment.key, stdout=out)
    assert demo.DEMO_CARD not in out.getvalue()
    reminder = demo.reminder(8123, "s3cret", seeded)
    assert f"masked (••••) for the support login: {seeded.card_payment}" in reminder
    assert "support / s3cret" in demo.banner(8123, "s3cret", [], seeded)
