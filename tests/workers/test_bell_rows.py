"""The bells a start or an event writes as rows: django-q2's own signed packages."""

from __future__ import annotations

import pytest
from django_q.conf import Conf
from django_q.signing import BadSignature, SignedPackage

from django_workerflow.workers import bell_rows, bells


def test_payload__is_a_package_django_q2_reads_signed_with_its_current_prefix(monkeypatch):
    task = SignedPackage.loads(bell_rows.payload(7))
    assert (task["func"], task["args"], task["kwargs"], task["save"]) == (
        bells.TICK_TASK,
        (7,),
        {},
        False,
    )

    # Signed with django-q2's current PREFIX: a site whose PREFIX differs signs with its own.
    monkeypatch.setattr(Conf, "PREFIX", "another-site")
    other = bell_rows.payload(8)
    assert SignedPackage.loads(other)["args"] == (8,)
    monkeypatch.undo()
    with pytest.raises(BadSignature):
        SignedPackage.loads(other)
