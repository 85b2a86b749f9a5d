"""The instance page's "Retry" and "Fork…" buttons: their form pages and what a POST does.

Each view checks its permission on the server (a crafted POST without it is a 403), shows
its form, calls :mod:`~django_workerflow.console.rerun_requests` and records the report in the
admin history, like the other controls of :mod:`~django_workerflow.console.instance_views`.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path

from django_workerflow.console import rerun_requests
from django_workerflow.console.controls import ControlName, admin_url, url_name
from django_workerflow.console.instance_views import ControlViews
from django_workerflow.console.replies import confirmation_page, record
from django_workerflow.console.rerun_forms import ForkForm, RetryForm


class RerunViews(ControlViews):
    """Retry and fork for one instance of the model admin."""

    def urls(self) -> list[URLPattern]:
        """``<object_id>/retry/`` and ``<object_id>/fork/``, behind the admin's login."""
        wrap = self.model_admin.admin_site.admin_view
        return [
            path(
                f"<path:object_id>/{name}/",
                wrap(view),
                name=url_name(self.model_admin, name),
            )
            for name, view in ((ControlName.RETRY, self.retry), (ControlName.FORK, self.fork))
        ]

    def retry(self, request: HttpRequest, object_id: str) -> HttpResponse:
        instance = self._instance_for(request, object_id, ControlName.RETRY)
        data = request.POST if request.method == "POST" else None
        form = RetryForm(data, instances=[instance])
        if form.is_valid():
            report = rerun_requests.retry(
                [instance], form.cleaned_data["reason"], with_children=form.with_children
            )
            return self._done(request, report, instance)
        return confirmation_page(self.model_admin, request, ControlName.RETRY, form, [instance])

    def fork(self, request: HttpRequest, object_id: str) -> HttpResponse:
        instance = self._instance_for(request, object_id, ControlName.FORK)
        form = ForkForm(instance, request.POST if request.method == "POST" else None)
        if form.is_valid():
            report, forked = rerun_requests.fork(instance, form.fork_request())
            if forked is not None:
                record(self.model_admin, request, report)
                return HttpResponseRedirect(admin_url(self.model_admin, "change", forked.pk))
            form.add_error(None, report.summary())
        return confirmation_page(self.model_admin, request, ControlName.FORK, form, [instance])
