"""Every replay pass sees the pinned input, even when an earlier pass of the same tick
changed ``self.input``."""

from __future__ import annotations

import pytest

import django_workerflow as workerflow
from django_workerflow.models import WorkflowStatus

pytestmark = pytest.mark.django_db


def test_tick__each_pass_gets_the_pinned_input_even_if_a_pass_changed_it(
    define, workerflow_harness
):
    seen = []
    failures = [1]

    def flaky():
        if failures:
            failures.pop()
            raise ValueError("once")
        return "ok"

    def execute(self):
        seen.append(repr(self.input))
        self.input["n"] += 1
        self.input["items"].append("changed")
        # A retry due at once makes the same tick replay a second pass.
        return self.run("flaky", flaky, backoff=lambda attempt: 0)

    instance = workerflow.start(define(execute), input={"n": 1, "items": ["a"]})
    assert workerflow_harness.drain() == 1
    instance.refresh_from_db()
    assert (instance.status, instance.input) == (
        WorkflowStatus.COMPLETED,
        {"n": 1, "items": ["a"]},
    )
    assert seen == [repr({"n": 1, "items": ["a"]})] * 2
