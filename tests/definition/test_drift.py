"""Visible trouble: an instance no worker can run, definitions workers do not import,
events under a name nothing waits for, unknown keys in signal handlers, a missing Q_CLUSTER."""

from __future__ import annotations

import logging
import sys
import types
from datetime import timedelta
from io import StringIO

import pytest
from django import conf as django_conf
from django.core.management import call_command
from django.test import override_settings
from django.urls import get_resolver

import django_workerflow as workerflow
from django_workerflow import WorkflowDefinition, registry
from django_workerflow.checks import check_definition_modules, check_worker_settings
from django_workerflow.definition import drift
from django_workerflow.definition.drift import (
    awaited_event_names,
    missing_definition,
    unimported_definitions,
    worker_imported_modules,
)
from django_workerflow.definition.drift import (
    worker_imported_modules as drift_worker_imported_modules,
)
from django_workerflow.models import InboundEvent, WorkflowInstance
from tests.support.instances import VERSION, refreshed

# A definition no worker has ------------------------------------------------------------


@pytest.mark.django_db
def test_missing_definition__names_the_workflow_and_version_no_worker_has(
    workerflow_harness, define
):
    definition = define(lambda self: 1, name="drift-flow")
    registered = workerflow.start(definition, key="known")
    orphan = WorkflowInstance.objects.create_pending(
        key="orphan",
        definition_name="drift-flow",
        definition_version="1999",
        input=None,
        now=workerflow_harness.now(),
    )

    assert missing_definition(registered) is None
    assert missing_definition(orphan) == "no worker has workflow 'drift-flow' version '1999'"


@pytest.mark.django_db
def test_unregistered_instance__log_hint_says_where_definitions_must_live(
    workerflow_harness, caplog
):
    WorkflowInstance.objects.create_pending(
        key="orphan",
        definition_name="nowhere",
        definition_version="1",
        input=None,
        now=workerflow_harness.now(),
    )
    with caplog.at_level(logging.WARNING, logger="django_workerflow"):
        workerflow_harness.drain()

    [record] = [r for r in caplog.records if "definition not registered" in r.getMessage()]
    message = record.getMessage()
    assert "key=orphan definition=nowhere version=1" in message
    assert "`workflows` module of each installed app" in message


# Definitions registered where workers do not look ----------------------------------------


def test_worker_imported_modules__are_the_installed_apps_workflows_modules():
    modules = worker_imported_modules()
    assert "testproject.shop.workflows" in modules
    assert "tests.clusterapp.workflows" in modules


def test_check_w011__passes_a_definition_of_a_workflows_module():
    from testproject.shop.workflows import OrderFulfillment

    assert unimported_definitions([OrderFulfillment]) == []


def test_check_w011__warns_about_a_definition_registered_from_a_view_module(define):
    definition = define(lambda self: 1, name="view-only-flow")
    definition.__module__ = "testproject.shop.views"

    warnings = [w for w in check_definition_modules() if w.obj is definition]

    assert [w.id for w in warnings] == ["workerflow.W011"]
    assert "'view-only-flow'" in warnings[0].msg
    assert "testproject.shop.views" in warnings[0].msg
    assert "workflows" in warnings[0].hint


def test_check_w011__passes_a_definition_a_workflows_module_imports(monkeypatch):
    module = types.ModuleType("drift_shared_definitions")
    monkeypatch.setitem(sys.modules, module.__name__, module)

    class Shared(WorkflowDefinition):
        name = "drift-shared"
        version = VERSION
        __module__ = module.__name__

        def execute(self):
            return 1

    try:
        assert unimported_definitions([Shared]) == [Shared]
        shop_workflows = sys.modules["testproject.shop.workflows"]
        monkeypatch.setattr(shop_workflows, "drift_shared", module, raising=False)
        module.Shared = Shared
        assert unimported_definitions([Shared]) == []
    finally:
        registry.unregister(Shared)


# The package too: a package keeps its submodules as attributes, which a fresh import of
# the URLconf would otherwise find instead of importing the view module again.
VIEW_ONLY = ("tests.viewonly.urls", "tests.viewonly.views", "tests.viewonly")


@pytest.fixture
def view_only_urlconf(monkeypatch):
    """ROOT_URLCONF is a URLconf whose view module declares 'view-only-report', not yet
    imported; counted as a module outside the suite's (see conftest)."""
    for name in VIEW_ONLY:
        sys.modules.pop(name, None)
    monkeypatch.setattr(drift, "worker_imported_modules", drift_worker_imported_modules)
    with override_settings(ROOT_URLCONF=VIEW_ONLY[0]):
        yield
    views = sys.modules.get(VIEW_ONLY[1])
    if views is not None:
        registry.unregister(views.ViewOnlyReport)
    for name in VIEW_ONLY:
        sys.modules.pop(name, None)


def w011_names() -> list[str]:
    return [w.obj.name for w in check_definition_modules() if w.id == "workerflow.W011"]


def test_check_w011__is_the_same_whether_or_not_another_check_imported_the_urlconf_first(
    view_only_urlconf,
):
    # manage.py check runs the checks in no fixed order: the URL checks may come first.
    first = w011_names()
    assert get_resolver().url_patterns  # what Django's URL check does when it runs first
    second = w011_names()
    assert "view-only-report" in first
    assert first == second


@pytest.mark.django_db
def test_show__warns_that_no_worker_has_a_definition_registered_from_a_view_module(
    view_only_urlconf, workerflow_harness
):
    assert get_resolver().url_patterns  # the command's system checks import the URLconf
    workerflow.start("view-only-report", key="report-1")
    out = StringIO()
    call_command("workerflow", "show", "report-1", stdout=out)
    assert (
        "Warning: no worker has workflow 'view-only-report' version '1': it is registered "
        "from tests.viewonly.views, which workers do not import."
    ) in out.getvalue()


# Events -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_send_event__with_missing_ok_returns_none_for_an_unknown_key(workerflow_harness):
    assert workerflow.send_event("no-such-key", "paid", {"x": 1}, missing_ok=True) is None
    assert not InboundEvent.objects.exists()
    with pytest.raises(WorkflowInstance.DoesNotExist, match="no-such-key"):
        workerflow.send_event("no-such-key", "paid")


@pytest.mark.django_db
def test_send_event__under_a_name_no_step_waits_for_says_which_names_are_awaited(
    workerflow_harness, define, caplog
):
    def execute(self):
        return self.all(
            lambda: self.wait("approval", "order.approved", timeout=timedelta(days=1)),
            lambda: self.wait("payment", "order.paid"),
        )

    instance = workerflow.start(define(execute), key="waits")
    workerflow_harness.drain()
    assert awaited_event_names(instance) == ["order.approved", "order.paid"]

    with caplog.at_level(logging.INFO, logger="django_workerflow"):
        event = workerflow.send_event("waits", "order.aproved")

    assert event is not None
    assert event.claimed_by_id is None
    assert event.waiting_for == ["order.approved", "order.paid"]
    assert (
        "event queued key=waits event=order.aproved: no step waits for it; "
        "waiting_for=order.approved,order.paid" in caplog.text
    )

    claimed = workerflow.send_event("waits", "order.paid")
    assert claimed.claimed_by_id is not None
    assert claimed.waiting_for is None
    assert awaited_event_names(refreshed(instance)) == ["order.approved"]


# Q_CLUSTER missing altogether -----------------------------------------------------------


def test_check_w010__one_clear_message_when_q_cluster_is_missing_altogether():
    with override_settings():
        del django_conf.settings.Q_CLUSTER
        warnings = check_worker_settings()
    assert [w.id for w in warnings] == ["workerflow.W010"]
    assert "Q_CLUSTER is not set" in warnings[0].msg
    assert "'orm': 'default'" in warnings[0].hint


# What every process registers while it sets up -------------------------------------------

READY_APP = ("tests.readyapp.urls", "tests.readyapp.views")


@pytest.fixture
def ready_app_urlconf(monkeypatch):
    """ROOT_URLCONF is the ready app's, whose views module declares a task; modules of the
    suite are not counted as imported by workers (see conftest)."""
    for name in READY_APP:
        sys.modules.pop(name, None)
    monkeypatch.setattr(drift, "worker_imported_modules", drift_worker_imported_modules)
    with override_settings(ROOT_URLCONF=READY_APP[0]):
        yield
    for name in READY_APP:
        sys.modules.pop(name, None)


def test_check_w011__passes_a_definition_an_app_s_ready_imports(ready_app_urlconf):
    from tests.readyapp.flows import ReadyRegistered

    assert "ready-registered" not in w011_names()
    assert unimported_definitions([ReadyRegistered]) == []


def test_check_w011__passes_a_task_a_views_module_declares(ready_app_urlconf):
    names = w011_names()
    from tests.readyapp.views import send_receipt

    assert registry.lookup(send_receipt.module_path, "1") is not None  # the check's import
    assert send_receipt.module_path not in names
    assert [name for name in names if "readyapp" in name] == []


def test_check_w011__still_warns_about_a_workflow_a_views_module_declares(view_only_urlconf):
    assert "view-only-report" in w011_names()


def test_missing_definition__a_task_registered_here_is_not_said_to_be_missing(db):
    from tests.readyapp.views import send_receipt

    result = send_receipt.enqueue(7)
    instance = WorkflowInstance.objects.get(key=result.id)

    assert missing_definition(instance) is None
