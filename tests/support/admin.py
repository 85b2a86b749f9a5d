"""What the admin console tests share: the shop workflow they run, the console's URLs, and
clients of users holding given permissions."""

from __future__ import annotations

import html
from collections import Counter

from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from django_workerflow.models import WorkflowInstance

ATTEMPTS: Counter[str] = Counter()
"""Calls of the shop's ``charge`` step, by instance key."""


def shop_execute(self):
    """Reserve, charge (failing ``input["failures"]`` times), cool off an hour, await payment."""
    self.run("reserve", lambda: {"sku": "A-1"})

    def charge():
        ATTEMPTS[self.key] += 1
        if ATTEMPTS[self.key] <= self.input.get("failures", 0):
            raise RuntimeError("card declined")
        return {"charged": 42}

    self.run("charge", charge, max_attempts=self.input.get("max_attempts", 3))
    self.sleep("cool-off", 3600)
    payment = self.wait("payment", "payment.received", timeout=7200)
    return {"paid": payment}


def changelist_url(**params: str) -> str:
    url = reverse("admin:workerflow_workflowinstance_changelist")
    if params:
        url += "?" + "&".join(f"{key}={value}" for key, value in params.items())
    return url


def change_url(instance: WorkflowInstance, view: str = "change") -> str:
    return reverse(f"admin:workerflow_workflowinstance_{view}", args=[instance.pk])


def text(response) -> str:
    """The response body with HTML entities decoded, for reading its words."""
    return html.unescape(response.content.decode())


def staff_client(*codenames: str, staff: bool = True, enforce_csrf: bool = False) -> Client:
    """A client logged in as a new user holding exactly these workerflow permissions."""
    user = User.objects.create_user(f"user-{User.objects.count()}", is_staff=staff)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="workerflow", codename__in=codenames)
    )
    client = Client(enforce_csrf_checks=enforce_csrf)
    client.force_login(user)
    return client


def messages_of(response) -> list[str]:
    """The messages the console showed with ``response``."""
    return [str(message) for message in response.context["messages"]]
