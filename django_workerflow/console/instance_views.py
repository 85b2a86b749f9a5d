"""The views behind the instance page's buttons, and the URLs that reach them.

Each view checks the control's permission, finds the instance, calls
:mod:`~django_workerflow.console.operations` and redirects back to the instance page with the
report recorded. Pause, resume and wake are one-click POSTs; cancel and send event show their
form first.
"""

from __future__ import annotations

from collections.abc import Callable

from django.contrib.admin import ModelAdmin
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path
from django.views.decorators.http import require_POST

from django_workerflow.console import operations
from django_workerflow.console.controls import ControlName, admin_url, may_use, url_name
from django_workerflow.console.forms import CancelForm, SendEventForm, awaited_event_initial
from django_workerflow.console.replies import confirmation_page, record
from django_workerflow.models import WorkflowInstance

View = Callable[[HttpRequest, str], HttpResponse]


class ControlViews:
    """The control views of one model admin, which supplies the instances, the permission
    checks and the admin history."""

    def __init__(self, model_admin: ModelAdmin[WorkflowInstance]) -> None:
        self.model_admin = model_admin

    def urls(self) -> list[URLPattern]:
        """``<object_id>/<control>/``, named ``<app>_<model>_<control>``, behind the admin's
        login and CSRF checks."""
        views: dict[ControlName, View] = {
            ControlName.PAUSE: require_POST(self.pause),
            ControlName.RESUME: require_POST(self.resume),
            ControlName.WAKE: require_POST(self.wake),
            ControlName.CANCEL: self.cancel,
            ControlName.SEND_EVENT: self.send_event,
        }
        wrap = self.model_admin.admin_site.admin_view
        return [
            path(f"<path:object_id>/{name}/", wrap(view), name=url_name(self.model_admin, name))
            for name, view in views.items()
        ]

    def pause(self, request: HttpRequest, object_id: str) -> HttpResponse:
        instance = self._instance_for(request, object_id, ControlName.PAUSE)
        return self._done(request, operations.pause([instance]), instance)

    def resume(self, request: HttpRequest, object_id: str) -> HttpResponse:
        instance = self._instance_for(request, object_id, ControlName.RESUME)
        return self._done(request, operations.resume([instance]), instance)

    def wake(self, request: HttpRequest, object_id: str) -> HttpResponse:
        instance = self._instance_for(request, object_id, ControlName.WAKE)
        return self._done(request, operations.wake([instance]), instance)

    def cancel(self, request: HttpRequest, object_id: str) -> HttpResponse:
        instance = self._instance_for(request, object_id, ControlName.CANCEL)
        form = CancelForm(request.POST if request.method == "POST" else None)
        if form.is_valid():
            report = operations.cancel([instance], form.cleaned_data["reason"])
            return self._done(request, report, instance)
        return confirmation_page(self.model_admin, request, ControlName.CANCEL, form, [instance])

    def send_event(self, request: HttpRequest, object_id: str) -> HttpResponse:
        instance = self._instance_for(request, object_id, ControlName.SEND_EVENT)
        form = SendEventForm(
            request.POST if request.method == "POST" else None,
            initial=awaited_event_initial([instance]),
        )
        if form.is_valid():
            data = form.cleaned_data
            report = operations.send_event(
                [instance], data["event_name"], data["payload"], data["idempotency_key"]
            )
            return self._done(request, report, instance)
        return confirmation_page(
            self.model_admin, request, ControlName.SEND_EVENT, form, [instance]
        )

    def _instance_for(
        self, request: HttpRequest, object_id: str, control: ControlName
    ) -> WorkflowInstance:
        if not may_use(self.model_admin, request, control):
            raise PermissionDenied
        instance = self.model_admin.get_object(request, unquote(object_id))
        if instance is None:
            raise Http404(f"No workflow instance with id {object_id!r}.")
        return instance

    def _done(
        self, request: HttpRequest, report: operations.Report, instance: WorkflowInstance
    ) -> HttpResponse:
        record(self.model_admin, request, report)
        return HttpResponseRedirect(admin_url(self.model_admin, "change", instance.pk))
