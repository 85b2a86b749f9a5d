"""Stranded instances in a real browser (Debian's chromium through Playwright): after a deploy
renamed a step in place, an operator filters the instance list by "replays on current code:
no", reads an instance's verdict and its reason on its page, and forks the stranded
selection onto the current version with a reason."""

from __future__ import annotations

import re

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User

import django_workerflow as workerflow
from django_workerflow import WorkflowDefinition, testing
from django_workerflow.deploy import verdicts
from django_workerflow.models import WorkflowInstance

from .console import CHANGELIST, PASSWORD, login, message, row

sync_api = pytest.importorskip(
    "playwright.sync_api",
    reason="playwright is not installed: run `bash .ci/install-browser .venv`",
)
expect = sync_api.expect

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def onboarding(self):
    self.run("create-account", lambda: "account")
    self.run("welcome", lambda: "mail sent")
    self.sleep("nap", 3600)
    return "done"


def onboarding_renamed(self):
    self.run("create-account", lambda: "account")
    self.run("send-welcome", lambda: "mail sent")  # renamed in place: a deploy's mistake
    self.sleep("nap", 3600)
    return "done"


@pytest.fixture
def deployed(define, workerflow_harness):
    """Two onboarding instances recorded by the old code and a healthy 'digest' instance;
    then the renamed step is deployed and the background pass has stored the verdicts."""
    define(onboarding, name="onboarding", version="1")
    for key in ("user-1", "user-2"):
        workerflow.start("onboarding", key=key)
    digest = define(lambda self: self.sleep("until-monday", 86400), name="digest", version="1")
    workerflow.start(digest, key="digest-1")
    workerflow_harness.drain()
    with testing.registered():
        attrs = {"name": "onboarding", "version": "1", "execute": onboarding_renamed}
        type("Onboarding", (WorkflowDefinition,), {**attrs, "__module__": __name__})
        verdicts.refresh()
        yield workerflow_harness


def test_operator__filters_the_stranded_instances_reads_a_verdict_and_forks_them(
    live_server, page, artifacts, deployed
):
    User.objects.create_superuser("operator", "operator@example.com", PASSWORD)
    login(page, live_server, "operator")
    expect(page.locator("#result_list tbody tr")).to_have_count(3)

    filters = page.locator("#changelist-filter")
    filters.get_by_role("link", name="no (stranded)").click()
    expect(page).to_have_url(re.compile(r"replays=no"))
    expect(page.locator("#result_list tbody tr")).to_have_count(2)
    expect(row(page, "digest-1")).to_have_count(0)
    page.screenshot(path=str(artifacts / "admin-stranded-filter.png"), full_page=True)

    row(page, "user-1").get_by_role("link", name="user-1").click()
    verdict = page.locator("#wf-replay-verdict")
    expect(verdict).to_contain_text("Replays on current code no")
    expect(verdict).to_contain_text(
        "reaches the new step 'send-welcome' where its history recorded 'welcome'"
    )
    page.screenshot(path=str(artifacts / "admin-stranded-verdict.png"), full_page=True)

    page.goto(f"{live_server.url}{CHANGELIST}?replays=no")
    page.locator("#action-toggle").check()
    page.select_option("select[name=action]", "fork_onto_current")
    page.get_by_role("button", name=re.compile("Go|Run")).click()
    expect(page.locator("#wf-action-intro")).to_contain_text("registered default version")
    expect(page.locator("#wf-selected li")).to_have_count(2)
    page.fill("#id_reason", "deploy 812 renamed welcome (INC-77)")
    page.get_by_role("button", name="Yes, fork").click()

    expect(message(page)).to_have_text("2 workflows forked")
    forks = WorkflowInstance.objects.filter(forked_from__key__in=["user-1", "user-2"])
    assert sorted(forks.values_list("key", flat=True)) == ["user-1~1", "user-2~1"]
    assert all(workerflow.replay_verdict(fork).ok for fork in forks)
    changes = [entry.get_change_message() for entry in LogEntry.objects.all()]
    assert len(changes) == 2
    assert all("Reason: deploy 812 renamed welcome (INC-77)" in change for change in changes)

    # The forks have no stored verdict yet: "not checked yet" until the pass comes.
    page.goto(f"{live_server.url}{CHANGELIST}?replays=unchecked")
    expect(page.locator("#result_list tbody tr")).to_have_count(2)
    expect(row(page, "user-1~1")).to_have_count(1)
