"""Turn the shop's own model events into workflow events."""

from __future__ import annotations

from django.db.models.signals import post_save
from django.dispatch import receiver

import django_workerflow as workerflow

from .models import Payment


@receiver(post_save, sender=Payment)
def payment_received(sender: type[Payment], instance: Payment, created: bool, **kwargs) -> None:
    """A saved payment is the event the order's workflow waits for.

    send_event runs in the same transaction as the save, so the workflow only hears of
    payments that really committed.
    """
    if created:
        workerflow.send_event(
            instance.order.workflow_key,
            "payment.received",
            {"amount_cents": instance.amount_cents, "reference": instance.reference},
        )
