"""The replay verdict of an instance: ``workerflow.replay_verdict()``, the verdicts stored in
the background for the admin's filter, the bulk fork of stranded instances, and
``workerflow list --stranded``. The judgement is check-replay's."""

from __future__ import annotations

import dataclasses
import re
from contextlib import contextmanager
from io import StringIO

import pytest
from django.contrib.admin.models import LogEntry
from django.core.management import call_command
from django.core.management.base import CommandError

import django_workerflow as workerflow
from django_workerflow import WorkflowDefinition, testing
from django_workerflow.deploy import verdicts
from django_workerflow.deploy.verdicts import VerdictState
from django_workerflow.models import (
    ReplayVerdictRecord,
    WorkflowEvent,
    WorkflowInstance,
    WorkflowStatus,
)
from django_workerflow.values.replay_verdict import ReplayVerdict
from tests.support.admin import change_url, changelist_url, staff_client, text

pytestmark = pytest.mark.django_db

BREAK_LINE = re.compile(r"^BREAK '([^']*)' \([^)]*\): (.*)$", re.MULTILINE)


def onboarding(self):
    self.run("create-account", lambda: "account")
    self.run("welcome", lambda: "mail sent")
    self.sleep("nap", 3600)
    self.run("survey", lambda: "survey")
    return "done"


def welcome_became_a_sleep(self):
    self.run("create-account", lambda: "account")
    self.sleep("welcome", 60)  # was a run step: the recorded histories cannot replay
    self.sleep("nap", 3600)
    return "done"


def welcome_renamed(self):
    self.run("create-account", lambda: "account")
    self.run("greet", lambda: "mail sent")  # a rename: 'greet' would run as if new
    self.sleep("nap", 3600)
    return "done"


@pytest.fixture
def sleeping_onboardings_and_one_done(define, workerflow_harness):
    """Three onboarding instances asleep in 'nap', and one completed."""
    original = define(onboarding, name="onboarding", version="1")
    for number in range(3):
        workerflow.start(original, key=f"user-{number}")
    workerflow_harness.drain()
    done = define(lambda self: "ok", name="quick", version="1")
    workerflow.start(done, key="finished")
    workerflow_harness.drain()
    return original


@contextmanager
def deployed(execute):
    """The code of 'onboarding' v1 replaced by ``execute`` (a deploy), restored after."""
    with testing.registered():
        type(
            "Onboarding",
            (WorkflowDefinition,),
            {"name": "onboarding", "version": "1", "execute": execute, "__module__": __name__},
        )
        yield


def check_replay_breaks() -> dict[str, str]:
    """check-replay's BREAK lines, as {key: message}."""
    out = StringIO()
    with pytest.raises(CommandError):
        call_command("workerflow", "check-replay", stdout=out)
    return dict(BREAK_LINE.findall(out.getvalue()))


def keys(queryset) -> list[str]:
    return sorted(queryset.values_list("key", flat=True))


def everyone():
    return WorkflowInstance.objects.all()


# replay_verdict() ---------------------------------------------------------------------------


def test_replay_verdict__is_ok_with_an_empty_reason_when_the_code_is_unchanged(
    sleeping_onboardings_and_one_done,
):
    verdict = workerflow.replay_verdict("user-1")

    assert verdict == ReplayVerdict(ok=True, reason="")
    assert workerflow.replay_verdict(WorkflowInstance.objects.get(key="user-2")).ok


def test_replay_verdict__is_immutable(sleeping_onboardings_and_one_done):
    verdict = workerflow.replay_verdict("user-1")

    with pytest.raises(dataclasses.FrozenInstanceError):
        verdict.ok = False  # type: ignore[misc]


def test_replay_verdict__names_check_replays_reason_when_the_code_breaks_the_history(
    sleeping_onboardings_and_one_done,
):
    with deployed(welcome_became_a_sleep):
        verdict = workerflow.replay_verdict("user-1")
        breaks = check_replay_breaks()

    assert not verdict.ok
    assert verdict.reason == breaks["user-1"]
    assert "reached step 'welcome' as a sleep" in verdict.reason


def test_replay_verdict__counts_a_renamed_step_as_a_break_as_check_replay_does(
    sleeping_onboardings_and_one_done,
):
    with deployed(welcome_renamed):
        verdict = workerflow.replay_verdict("user-0")
        breaks = check_replay_breaks()

    assert not verdict.ok
    assert verdict.reason == breaks["user-0"]
    assert "new step 'greet'" in verdict.reason


def test_replay_verdict__of_a_finished_instance_is_ok_with_nothing_to_replay(
    sleeping_onboardings_and_one_done,
):
    workerflow.cancel("user-2", reason="test")

    with deployed(welcome_became_a_sleep):
        assert workerflow.replay_verdict("user-2") == ReplayVerdict(ok=True)
        assert workerflow.replay_verdict("finished") == ReplayVerdict(ok=True)


def test_replay_verdict__of_an_unknown_key_raises_does_not_exist(sleeping_onboardings_and_one_done):
    with pytest.raises(WorkflowInstance.DoesNotExist, match="'nobody'"):
        workerflow.replay_verdict("nobody")


def test_replay_verdict__writes_nothing(sleeping_onboardings_and_one_done):
    with deployed(welcome_became_a_sleep):
        workerflow.replay_verdict("user-1")

    assert not ReplayVerdictRecord.objects.exists()


# Stored verdicts ----------------------------------------------------------------------------


def test_refresh__stores_a_verdict_for_each_unfinished_instance(sleeping_onboardings_and_one_done):
    done = verdicts.refresh()

    assert (done.checked, done.stranded) == (3, 0)
    assert keys(verdicts.with_state(everyone(), VerdictState.REPLAYS)) == [
        "user-0",
        "user-1",
        "user-2",
    ]
    assert not verdicts.with_state(everyone(), VerdictState.STRANDED).exists()
    assert not verdicts.with_state(everyone(), VerdictState.UNCHECKED).exists()


def test_refresh__checks_only_instances_without_a_current_verdict(
    sleeping_onboardings_and_one_done,
):
    verdicts.refresh()

    assert verdicts.refresh().checked == 0
    assert verdicts.refresh(recheck=True).checked == 3


def test_a_verdict_stored_for_older_code_is_not_shown_as_current(sleeping_onboardings_and_one_done):
    verdicts.refresh()

    with deployed(welcome_became_a_sleep):
        assert verdicts.code_fingerprint() != ReplayVerdictRecord.objects.first().code
        assert keys(verdicts.with_state(everyone(), VerdictState.UNCHECKED)) == [
            "user-0",
            "user-1",
            "user-2",
        ]
        assert not verdicts.with_state(everyone(), VerdictState.REPLAYS).exists()
        instance = WorkflowInstance.objects.get(key="user-1")
        assert verdicts.stored_verdict(instance) is None

        done = verdicts.refresh()

        assert (done.checked, done.stranded) == (3, 3)
        stranded = verdicts.with_state(everyone(), VerdictState.STRANDED)
        assert keys(stranded) == ["user-0", "user-1", "user-2"]
        assert verdicts.stored_verdict(instance) == workerflow.replay_verdict(instance)


def test_the_fingerprint_changes_with_the_code_and_not_without(sleeping_onboardings_and_one_done):
    before = verdicts.code_fingerprint()

    assert verdicts.code_fingerprint() == before
    with deployed(welcome_renamed):
        assert verdicts.code_fingerprint() != before
    assert verdicts.code_fingerprint() == before


def test_an_instance_that_finishes_drops_out_of_the_filter_and_its_verdict_is_removed(
    sleeping_onboardings_and_one_done,
):
    with deployed(welcome_became_a_sleep):
        verdicts.refresh()
        workerflow.cancel("user-0", reason="stranded")

        assert keys(verdicts.with_state(everyone(), VerdictState.STRANDED)) == [
            "user-1",
            "user-2",
        ]
        assert verdicts.refresh().removed == 1
    assert not ReplayVerdictRecord.objects.filter(instance__key="user-0").exists()


def test_the_background_task_goes_on_in_runs_until_every_instance_is_checked(
    sleeping_onboardings_and_one_done, monkeypatch
):
    queued: list[int] = []
    monkeypatch.setattr(verdicts, "BATCH_SIZE", 1)
    monkeypatch.setattr(verdicts, "BATCHES_PER_TASK", 2)
    monkeypatch.setattr(verdicts, "queue_refresh", queued.append)

    first = verdicts.run_task(0)
    assert first == 2
    assert len(queued) == 1
    second = verdicts.run_task(queued[-1])

    assert second == 1
    assert len(queued) == 1  # nothing left: no next run
    assert not verdicts.with_state(everyone(), VerdictState.UNCHECKED).exists()


def test_a_spawned_worker_queues_the_pass_only_when_instances_are_unchecked(
    sleeping_onboardings_and_one_done, monkeypatch
):
    queued: list[int] = []
    monkeypatch.setattr(verdicts, "queue_refresh", lambda after_pk=0: queued.append(after_pk))

    assert verdicts.queue_on_spawn() is True
    verdicts.refresh()
    assert verdicts.queue_on_spawn() is False
    with deployed(welcome_renamed):
        assert verdicts.queue_on_spawn() is True

    assert queued == [0, 0]


def test_the_pass_has_a_schedule_created_once(db):
    from django_q.models import Schedule

    verdicts.ensure_schedule()
    verdicts.ensure_schedule()

    schedule = Schedule.objects.get(name=verdicts.SCHEDULE_NAME)
    assert schedule.func == "django_workerflow.tasks.refresh_replay_verdicts"


# The admin ----------------------------------------------------------------------------------


def test_the_instance_page_shows_the_verdict_with_its_reason(
    sleeping_onboardings_and_one_done, admin_client
):
    instance = WorkflowInstance.objects.get(key="user-1")

    page = text(admin_client.get(change_url(instance)))
    assert re.search(
        r'id="wf-replay-verdict"><span class="wf-label">Replays on current code</span> yes</p>',
        page,
    )
    with deployed(welcome_became_a_sleep):
        page = text(admin_client.get(change_url(instance)))
        reason = workerflow.replay_verdict(instance).reason

    assert 'id="wf-replay-verdict"' in page
    assert reason in page


def test_the_change_list_filter_lists_exactly_the_instances_of_each_verdict(
    sleeping_onboardings_and_one_done, admin_client, define, workerflow_harness
):
    other = define(lambda self: self.sleep("z", 3600), name="other", version="1")
    workerflow.start(other, key="unaffected")
    workerflow_harness.drain()
    with deployed(welcome_became_a_sleep):
        verdicts.refresh()
        workerflow.start(other, key="started-later")  # no verdict yet

        def listed(value: str) -> list[str]:
            response = admin_client.get(changelist_url(replays=value))
            return sorted(instance.key for instance in response.context["cl"].result_list)

        assert listed("no") == ["user-0", "user-1", "user-2"]
        assert listed("yes") == ["unaffected"]
        assert listed("unchecked") == ["started-later"]
        # The truth: each listed instance's verdict, judged now.
        assert all(not workerflow.replay_verdict(key).ok for key in listed("no"))
        assert all(workerflow.replay_verdict(key).ok for key in listed("yes"))
        page = text(admin_client.get(changelist_url()))
    assert "replays on current code" in page
    assert "no (stranded)" in page


def test_fork_onto_current__forks_the_stranded_selection_with_the_reason_and_audits(
    sleeping_onboardings_and_one_done, admin_client, define, workerflow_harness
):
    other = define(lambda self: self.sleep("z", 3600), name="other", version="1")
    workerflow.start(other, key="unaffected")
    workerflow_harness.drain()
    selected = list(WorkflowInstance.objects.filter(key__in=["user-0", "user-1", "unaffected"]))
    with deployed(welcome_became_a_sleep):
        confirm = admin_client.post(
            changelist_url(),
            {
                "action": "fork_onto_current",
                "index": 0,
                "_selected_action": [i.pk for i in selected],
            },
        )
        assert confirm.status_code == 200
        assert "Fork stranded workflows onto the current version" in text(confirm)
        assert not WorkflowInstance.objects.filter(key__contains="~").exists()

        done = admin_client.post(
            changelist_url(),
            {
                "action": "fork_onto_current",
                "_selected_action": [i.pk for i in selected],
                "apply": "1",
                "reason": "deploy 42 renamed welcome",
            },
            follow=True,
        )
        messages = [str(m) for m in done.context["messages"]]
        forks = WorkflowInstance.objects.filter(forked_from__key__in=["user-0", "user-1"])
        assert sorted(forks.values_list("key", flat=True)) == ["user-0~1", "user-1~1"]
        # The fork kept 'create-account' and runs from 'welcome' on: the new code replays it.
        assert all(workerflow.replay_verdict(fork).ok for fork in forks)

    assert messages == ["2 workflows forked; 1 skipped: replays on the current code"]
    changes = sorted(e.get_change_message() for e in LogEntry.objects.all())
    assert len(changes) == 2
    assert all("Reason: deploy 42 renamed welcome" in change for change in changes)
    assert changes[0].startswith("Forked 'user-0' into 'user-0~1'")
    assert "from step 'welcome'" in changes[0]
    event = WorkflowEvent.objects.get(instance__key="user-0", type="forked")
    assert event.reason == "forked to 'user-0~1': deploy 42 renamed welcome"
    assert WorkflowInstance.objects.get(key="user-0").status == WorkflowStatus.RUNNING


def test_cancel_of_a_stranded_selection_records_the_reason_and_audits(
    sleeping_onboardings_and_one_done, admin_client
):
    with deployed(welcome_became_a_sleep):
        verdicts.refresh()
        stranded = list(verdicts.with_state(everyone(), VerdictState.STRANDED))
        admin_client.post(
            changelist_url(replays="no"),
            {
                "action": "cancel_selected",
                "_selected_action": [i.pk for i in stranded],
                "apply": "1",
                "reason": "stranded by deploy 42",
            },
        )
        assert not verdicts.with_state(everyone(), VerdictState.STRANDED).exists()

    cancelled = WorkflowEvent.objects.filter(type="cancelled", reason="stranded by deploy 42")
    assert cancelled.count() == 3
    assert LogEntry.objects.count() == 3


@pytest.mark.parametrize(
    ("codenames", "action"),
    [
        (("view_workflowinstance", "cancel_workflowinstance"), "fork_onto_current"),
        (("view_workflowinstance", "fork_workflowinstance"), "cancel_selected"),
    ],
)
def test_the_bulk_actions_are_refused_without_their_permission(
    sleeping_onboardings_and_one_done, codenames, action
):
    client = staff_client(*codenames)
    selected = list(WorkflowInstance.objects.filter(key__startswith="user-"))

    with deployed(welcome_became_a_sleep):
        response = client.post(
            changelist_url(),
            {
                "action": action,
                "_selected_action": [i.pk for i in selected],
                "apply": "1",
                "reason": "not allowed",
            },
        )

    assert response.status_code == 403
    assert not WorkflowInstance.objects.filter(key__contains="~").exists()
    assert not WorkflowInstance.objects.filter(status=WorkflowStatus.CANCELLED).exists()


def test_the_fork_action_is_offered_to_a_user_with_the_fork_permission(
    sleeping_onboardings_and_one_done,
):
    client = staff_client("view_workflowinstance", "fork_workflowinstance")

    page = text(client.get(changelist_url()))

    assert "Fork stranded workflows onto the current version" in page


# list --stranded ----------------------------------------------------------------------------


def list_stranded(*args: str) -> tuple[str, int]:
    out = StringIO()
    try:
        call_command("workerflow", "list", "--stranded", *args, stdout=out)
    except CommandError as exc:
        return out.getvalue() + str(exc), exc.returncode
    return out.getvalue(), 0


def test_list_stranded__says_none_and_exits_0_when_the_code_replays_everything(
    sleeping_onboardings_and_one_done,
):
    output, code = list_stranded()

    assert code == 0
    assert "No unfinished instance is stranded" in output


@pytest.mark.parametrize("stored", [True, False], ids=["stored", "checked-now"])
def test_list_stranded__lists_the_stranded_instances_with_check_replays_reason(
    sleeping_onboardings_and_one_done, stored
):
    with deployed(welcome_became_a_sleep):
        if stored:
            verdicts.refresh()
        workerflow.cancel("user-2", reason="gone")
        output, code = list_stranded()
        breaks = check_replay_breaks()

    assert code == 1
    lines = [line for line in output.splitlines() if line.startswith("'")]
    assert [line.split("'")[1] for line in lines] == ["user-0", "user-1"]
    assert lines[0] == f"'user-0' (onboarding v1, running): {breaks['user-0']}"
    assert "2 unfinished instances cannot replay" in output


def test_list_stranded__checks_now_when_a_stored_verdict_is_stale(
    sleeping_onboardings_and_one_done,
):
    verdicts.refresh()  # all ok, for the old code
    with deployed(welcome_renamed):
        output, code = list_stranded("--format", "json")

    assert code == 1
    assert '"key": "user-0"' in output
    assert "new step 'greet'" in output


def test_fork_onto_current__of_a_renamed_step_runs_anew_from_the_step_it_replaces(
    sleeping_onboardings_and_one_done,
):
    from django_workerflow.console.replay_verdicts import fork_stranded

    with deployed(welcome_renamed):
        report = fork_stranded(WorkflowInstance.objects.filter(key="user-0"), "rename")
        fork = WorkflowInstance.objects.get(key="user-0~1")

        assert [o.label for o in report.entries] == ["forked"]
        assert "from step 'welcome'" in report.entries[0].detail
        assert list(fork.steps.values_list("step_id", flat=True)) == ["create-account"]
        assert workerflow.replay_verdict(fork).ok


def test_a_purge_deletes_instances_with_a_stored_verdict_and_the_pass_removes_it(
    sleeping_onboardings_and_one_done, workerflow_harness
):
    from datetime import timedelta

    from django_workerflow.runtime.purge import purge

    verdicts.refresh()
    workerflow.cancel("user-0", reason="done with it")

    report = purge(timedelta(days=1), None, now=workerflow_harness.now() + timedelta(days=2))

    assert report.instances == 2  # user-0 and 'finished'
    assert ReplayVerdictRecord.objects.count() == 3  # user-0's stays until the pass
    assert verdicts.refresh().removed == 1
    assert sorted(ReplayVerdictRecord.objects.values_list("instance__key", flat=True)) == [
        "user-1",
        "user-2",
    ]
