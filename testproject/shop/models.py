"""The example shop's own data: orders, and the payments that arrive for them."""

from django.db import models


class Order(models.Model):
    number = models.CharField(max_length=32, unique=True)
    customer_email = models.EmailField()
    amount_cents = models.PositiveIntegerField()
    status = models.CharField(max_length=16, default="new")
    capture_attempts = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.number

    @property
    def workflow_key(self) -> str:
        """The key of this order's workflow instance: one workflow per order."""
        return f"order-{self.number}"


class Payment(models.Model):
    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="payments")
    amount_cents = models.PositiveIntegerField()
    reference = models.CharField(max_length=64)
    received_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.reference


class Shipment(models.Model):
    order = models.OneToOneField(Order, on_delete=models.CASCADE, related_name="shipment")
    tracking_number = models.CharField(max_length=32)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.tracking_number


class ParcelShipment(models.Model):
    """One parcel of an order shipped in several parcels (one child workflow each)."""

    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="parcels")
    parcel = models.PositiveIntegerField()
    tracking_number = models.CharField(max_length=40)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["order", "parcel"], name="shop_one_booking_per_parcel")
        ]

    def __str__(self) -> str:
        return self.tracking_number


class CustomerNotice(models.Model):
    """The e-mail the shop sends once an order's workflow has finished (from on_finish)."""

    # The delivery id of the outcome: a redelivered hook finds its notice already sent.
    outcome_id = models.PositiveIntegerField(unique=True)
    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="notices")
    text = models.CharField(max_length=200)
    sent_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.text
