"""Settings: typed defaults, read on every access, unknown names refused."""

from __future__ import annotations

import pytest
from django.test import override_settings

from django_workerflow.conf import settings


def test_settings__defaults_when_the_project_sets_nothing():
    assert settings.TICK_BUDGET == 20.0
    assert settings.LEASE_SECONDS == 12.0
    assert settings.MAX_JSON_BYTES == 1024 * 1024
    assert settings.MAX_DURATION_DAYS == 3650
    assert settings.PREPARED_STATEMENTS is True
    assert settings.LOG_PAYLOADS is False
    assert settings.METRICS_TOKEN is None
    assert settings.METRICS_ALLOW is None


def test_settings__read_on_every_access_so_override_settings_applies():
    with override_settings(WORKERFLOW_TICK_BUDGET=5.0, WORKERFLOW_LOG_PAYLOADS=True):
        assert settings.TICK_BUDGET == 5.0
        assert settings.LOG_PAYLOADS is True
    assert settings.TICK_BUDGET == 20.0


def test_settings__an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError):
        settings.TICK_BUDGETS  # noqa: B018 - the read is the test
