"""Settings of the engine: flat ``WORKERFLOW_*`` names with defaults, read on every access."""

from __future__ import annotations

from typing import Any

from django.conf import settings as django_settings

DEFAULTS: dict[str, Any] = {
    # Seconds a tick may keep executing before it yields and re-enqueues itself.
    "TICK_BUDGET": 20.0,
    # Seconds a worker's lease on an instance lasts without renewal.
    "LEASE_SECONDS": 60.0,
    # Largest accepted JSON text (input, event payload, step result), in bytes.
    "MAX_JSON_BYTES": 1024 * 1024,
    # Longest accepted sleep, retry delay or wait timeout, in days.
    "MAX_DURATION_DAYS": 3650,
    # PostgreSQL: run the hot statements as server-side prepared statements. Turn it off
    # behind PgBouncer in transaction mode older than 1.21 (no prepared statement support).
    "PREPARED_STATEMENTS": True,
    # Include payloads and results in log messages (off: they may hold personal data).
    "LOG_PAYLOADS": False,
}


class Settings:
    """``settings.WORKERFLOW_<NAME>`` if set, else the default; never cached."""

    def __getattr__(self, name: str) -> Any:
        if name not in DEFAULTS:
            raise AttributeError(f"Unknown django-workerflow setting {name!r}.")
        return getattr(django_settings, f"WORKERFLOW_{name}", DEFAULTS[name])


settings = Settings()
