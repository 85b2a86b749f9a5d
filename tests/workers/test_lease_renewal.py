"""The heartbeat: one thread per process renews the leases of the ticks running in it."""

from __future__ import annotations

import logging
import threading
import time
import uuid

import pytest
from django.db import transaction
from django.test import override_settings

from django_workerflow.models import WorkflowInstance
from django_workerflow.store import lease
from django_workerflow.values.clock import now
from django_workerflow.workers.lease_renewal import LeaseRenewal, _renewer
from tests.support.factories import WorkflowInstanceFactory

# The renewal thread has its own connection: it must see committed rows.
pytestmark = pytest.mark.django_db(transaction=True)

LEASE = 0.6  # seconds: renewed every 0.2 s


def claimed() -> tuple[WorkflowInstance, str]:
    instance = WorkflowInstanceFactory()
    token = uuid.uuid4().hex
    with transaction.atomic():
        locked = WorkflowInstance.objects.select_for_update().get(pk=instance.pk)
        lease.claim(locked, token, now())
    return instance, token


def expiry(instance: WorkflowInstance):
    return WorkflowInstance.objects.values_list("lease_expires_at", flat=True).get(pk=instance.pk)


def wait_for(condition, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


@pytest.mark.slow  # seconds of real processes or real time: `make test-fast` leaves it out
@override_settings(WORKERFLOW_LEASE_SECONDS=LEASE)
def test_heartbeat__renews_every_running_tick_and_stops_when_it_ends():
    (first, first_token), (second, second_token) = claimed(), claimed()
    taken = {first.pk: expiry(first), second.pk: expiry(second)}

    with LeaseRenewal(first.pk, first_token), LeaseRenewal(second.pk, second_token):
        assert wait_for(
            lambda: expiry(first) > taken[first.pk] and expiry(second) > taken[second.pk]
        )
        threads = [t for t in threading.enumerate() if t.name == "workerflow-lease"]
    ended = {first.pk: expiry(first), second.pk: expiry(second)}
    time.sleep(3 * LEASE)

    assert len(threads) == 1  # one thread serves both ticks
    assert (expiry(first), expiry(second)) == (ended[first.pk], ended[second.pk])


@pytest.mark.slow  # seconds of real processes or real time: `make test-fast` leaves it out
@override_settings(WORKERFLOW_LEASE_SECONDS=LEASE)
def test_heartbeat__a_lost_lease_is_logged_once_and_no_longer_renewed(caplog):
    instance, token = claimed()
    caplog.set_level(logging.WARNING, logger="django_workerflow")

    with LeaseRenewal(instance.pk, token):
        WorkflowInstance.objects.filter(pk=instance.pk).update(lease_token="another-worker")
        assert wait_for(lambda: "lease lost" in caplog.text)
        time.sleep(3 * LEASE)

    assert caplog.text.count(f"lease lost instance={instance.pk}") == 1


@pytest.mark.slow  # seconds of real processes or real time: `make test-fast` leaves it out
@override_settings(WORKERFLOW_LEASE_SECONDS=LEASE)
def test_heartbeat__a_tick_that_ended_is_not_reported_lost(caplog):
    instance, token = claimed()
    caplog.set_level(logging.WARNING, logger="django_workerflow")

    with LeaseRenewal(instance.pk, token):
        pass
    WorkflowInstance.objects.filter(pk=instance.pk).update(lease_token=None)
    time.sleep(2 * LEASE)

    assert "lease lost" not in caplog.text
    assert not _renewer._leases  # noqa: SLF001 - the renewer holds no lease once ticks end
