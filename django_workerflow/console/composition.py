"""Parents, children and the on_finish delivery of an instance, for the admin and the
``show`` command, and the admin's "top-level" filter and "deliver now" button."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import ModelAdmin
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path
from django.views.decorators.http import require_POST

from django_workerflow import registry
from django_workerflow.console.controls import admin_url, url_name
from django_workerflow.console.terminal import safe
from django_workerflow.console.time_words import short_time
from django_workerflow.models import FinishDelivery, WorkflowInstance
from django_workerflow.runtime.composition import deliveries
from django_workerflow.values.masking import Masker

MAX_CHILDREN = 100
DELIVER_NOW = "deliver-now"


@dataclass(slots=True)
class Composition:
    """What an instance's page shows of its parent, its children and its delivery."""

    parent: WorkflowInstance | None
    children: list[WorkflowInstance] = field(default_factory=list)
    child_count: int = 0
    delivery: FinishDelivery | None = None
    has_hook: bool = False
    #: Masks the sensitive values the delivery's errors quote.
    masker: Masker = field(default_factory=Masker)

    @property
    def delivery_attempts(self) -> list[dict[str, Any]]:
        """The delivery's newest attempts, their errors masked."""
        if self.delivery is None:
            return []
        return [
            {**attempt, "error": self.masker.text(attempt.get("error") or "")}
            for attempt in self.delivery.attempts or []
        ]

    @property
    def delivery_state(self) -> str:
        delivery = self.delivery
        if delivery is None and self.has_hook:
            return "none yet (created when the instance finishes)"
        if delivery is None:
            return "none (the definition has no on_finish)"
        if delivery.acknowledged_at is not None:
            return (
                f"acknowledged {short_time(delivery.acknowledged_at)} after "
                f"{delivery.attempt_count} attempt(s)"
            )
        text = f"pending, {delivery.attempt_count} attempt(s)"
        if delivery.outcome_status:
            # What every attempt reports, even once a retry has set the instance running.
            text += f"; reports the {delivery.outcome_status} finish"
        if delivery.next_attempt_at is not None:
            text += f"; next attempt {short_time(delivery.next_attempt_at)}"
        if delivery.last_error_name:
            text += f"; last error: {self.masker.text(delivery.last_error_message)}"
        return text


def load_composition(instance: WorkflowInstance, masker: Masker | None = None) -> Composition:
    """The parent, children and ``on_finish`` delivery of ``instance``; ``masker`` masks
    the sensitive values its delivery's errors quote (the history's masker)."""
    definition = registry.lookup(instance.definition_name, instance.definition_version)
    children = instance.children.order_by("created_at", "id")
    return Composition(
        parent=instance.parent,
        children=list(children[:MAX_CHILDREN]),
        child_count=children.count(),
        delivery=FinishDelivery.objects.filter(instance=instance).first(),
        has_hook=definition is not None and definition.hears_finish(),
        masker=masker or Masker(),
    )


def render_lines(composition: Composition) -> list[str]:
    """The ``show`` command's lines for the parent, the children and the delivery."""
    parent = composition.parent
    lines = [f"Parent: {safe(parent.key)} ({parent.status})" if parent else "Parent: none"]
    if composition.children:
        lines.append(f"Children ({composition.child_count}):")
        for child in composition.children:
            detached = ", detached" if child.detached else ""
            lines.append(f"  {safe(child.key)}  {child.status}{detached}")
        if composition.child_count > len(composition.children):
            lines.append(f"  ... {composition.child_count - len(composition.children)} more")
    else:
        lines.append("Children: none")
    lines.append(f"on_finish delivery: {safe(composition.delivery_state)}")
    return lines


class TopLevelFilter(admin.SimpleListFilter):
    """Top-level instances (started by a caller) or children (started by a parent)."""

    title = "level"
    parameter_name = "level"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("top", "Top-level"), ("child", "Children")]

    def queryset(
        self, request: HttpRequest, queryset: QuerySet[WorkflowInstance]
    ) -> QuerySet[WorkflowInstance]:
        if self.value() == "top":
            return queryset.filter(parent__isnull=True)
        if self.value() == "child":
            return queryset.filter(parent__isnull=False)
        return queryset


class DeliveryViews:
    """The "deliver now" button's view: the resume permission, as waking an instance."""

    def __init__(self, model_admin: ModelAdmin[WorkflowInstance]) -> None:
        self.model_admin = model_admin

    def urls(self) -> list[URLPattern]:
        wrap = self.model_admin.admin_site.admin_view
        view = wrap(require_POST(self.deliver_now))
        name = url_name(self.model_admin, DELIVER_NOW)
        return [path(f"<path:object_id>/{DELIVER_NOW}/", view, name=name)]

    def deliver_now(self, request: HttpRequest, object_id: str) -> HttpResponse:
        opts = self.model_admin.opts
        if not request.user.has_perm(f"{opts.app_label}.resume_{opts.model_name}"):
            raise PermissionDenied
        instance = self.model_admin.get_object(request, unquote(object_id))
        if instance is None:
            raise Http404(f"No workflow instance with id {object_id!r}.")
        delivery = FinishDelivery.objects.filter(instance=instance).first()
        if delivery is not None and deliveries.deliver_now(delivery):
            messages.success(request, f"The on_finish delivery of '{instance.key}' is due now.")
        else:
            messages.warning(request, f"'{instance.key}' has no pending on_finish delivery.")
        return HttpResponseRedirect(admin_url(self.model_admin, "change", instance.pk))
