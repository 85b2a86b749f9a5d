"""The harness every contract test runs its tasks on (virtual time, no worker)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from django_workerflow.testing import Harness


@pytest.fixture
def harness(db: None) -> Iterator[Harness]:
    with Harness() as running:
        yield running
