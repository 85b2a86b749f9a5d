"""pytest plugin (registered through the ``pytest11`` entry point): the harness fixture."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from django_workerflow.testing import Harness


@pytest.fixture
def workerflow_harness(db: None) -> Iterator[Harness]:
    """A :class:`~django_workerflow.testing.Harness` on a database-enabled test."""
    # Django is set up after pytest loads its plugins.
    from django_workerflow.testing import (
        Harness,  # imported late: Django is configured after plugins load
    )

    with Harness() as harness:
        yield harness
