"""A view module that declares a workflow definition, which workers never import."""

from django.http import HttpRequest, HttpResponse

from django_workerflow import WorkflowDefinition


class ViewOnlyReport(WorkflowDefinition):
    name = "view-only-report"
    version = "1"

    def execute(self) -> None:
        return None


def report(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")
