"""A views module that declares a task, imported only with the URLconf
(tests/definition/test_drift.py)."""

from django.http import HttpRequest, HttpResponse

try:  # Django 6
    from django.tasks import task
except ImportError:  # Django 5.2: the backport
    from django_tasks import task


@task()
def send_receipt(order_id: int) -> int:
    return order_id


def receipt(request: HttpRequest) -> HttpResponse:
    send_receipt.enqueue(1)
    return HttpResponse("ok")
