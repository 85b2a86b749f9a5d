"""Settings of the engine: flat ``WORKERFLOW_*`` names with defaults, read on every access.

``settings.TICK_BUDGET`` is ``django.conf.settings.WORKERFLOW_TICK_BUDGET`` when the project
sets it, else the default. Nothing is cached, so ``override_settings`` takes effect at once.
Each property's docstring says what its setting does (``python -m pydoc
django_workerflow.conf``).
"""

from __future__ import annotations

from typing import TypeVar

from django import conf as django_conf

T = TypeVar("T")


def _read(name: str, default: T) -> T:
    # Through django.conf, not an imported LazySettings: pydoc can read this module unset.
    # A project's setting is taken to have the default's type (checks.py validates them).
    value: T = getattr(django_conf.settings, f"WORKERFLOW_{name}", default)
    return value


class Settings:
    """The engine's settings, one typed property each; an unknown name is an AttributeError."""

    __slots__ = ()

    @property
    def TICK_BUDGET(self) -> float:
        """Seconds a tick may keep executing before it yields and re-enqueues itself."""
        return _read("TICK_BUDGET", 20.0)

    @property
    def LEASE_SECONDS(self) -> float:
        """Seconds a worker's lease on an instance lasts without renewal: about how long a
        killed worker's instance waits before another worker takes it over. The renewal thread
        renews it every third, so a callback that holds the GIL (one C call that never
        returns to Python) for more than two thirds of it can be taken over."""
        return _read("LEASE_SECONDS", 12.0)

    @property
    def MAX_INTERRUPTED_ATTEMPTS(self) -> int:
        """Attempts of a run step in a row that may die with their worker process (found
        interrupted) before the step fails with ``WorkerLostError`` instead of running again."""
        return _read("MAX_INTERRUPTED_ATTEMPTS", 3)

    @property
    def MAX_JSON_BYTES(self) -> int:
        """Largest accepted JSON text (input, event payload, step result), in bytes."""
        return _read("MAX_JSON_BYTES", 1024 * 1024)

    @property
    def MAX_DURATION_DAYS(self) -> float:
        """Longest accepted sleep, retry delay or wait timeout, in days."""
        return _read("MAX_DURATION_DAYS", 3650)

    @property
    def PREPARED_STATEMENTS(self) -> bool:
        """PostgreSQL: run the hot statements as prepared statements bound on the server.

        Turn it off behind PgBouncer in transaction mode older than 1.21 (no prepared
        statement support; 1.21 and newer need ``max_prepared_statements``)."""
        return _read("PREPARED_STATEMENTS", True)

    @property
    def LOG_PAYLOADS(self) -> bool:
        """Include payloads and results in log messages (off: they may hold personal data)."""
        return _read("LOG_PAYLOADS", False)

    @property
    def SWEEP_SECONDS(self) -> float:
        """Seconds between sweeps when bells are precise (django-q2's ORM broker): how soon
        an instance whose worker died (its lease expired) is rung again, and how often the
        workers report for ``manage.py workerflow health``."""
        return _read("SWEEP_SECONDS", 5.0)

    @property
    def SWEEP_IDLE_SECONDS(self) -> float:
        """Seconds to the next sweep when this one found nothing to do and no instance's
        alarm (a lease expiry, a timer) comes due before then; the chain goes back to
        ``SWEEP_SECONDS`` at the first sweep that finds either. Unset: three times
        ``SWEEP_SECONDS`` (15 s). At most ``SWEEP_SECONDS``: no idle backoff. The most a
        dead worker's instance waits once its lease expired, if the worker took it while the
        chain was idle."""
        value: float | None = _read("SWEEP_IDLE_SECONDS", None)
        return 3 * self.SWEEP_SECONDS if value is None else value

    @property
    def BELL_POLL_SECONDS(self) -> float:
        """PostgreSQL: seconds between the broker's safety-net polls of the bell queue. A
        cluster otherwise waits for a notification (or its next delayed bell), so this is
        (plus at most a second, when a bell is known to come due just after the poll, which
        then waits for it) the most a lost notification delays a bell."""
        return _read("BELL_POLL_SECONDS", 5.0)

    @property
    def BELL_LISTEN_DATABASE(self) -> str | None:
        """PostgreSQL: the database alias the broker LISTENs on for bell notifications (None:
        ``Q_CLUSTER["orm"]``). Name a direct connection when the broker's goes through a
        transaction-pooling proxy, which forwards no notifications."""
        return _read("BELL_LISTEN_DATABASE", None)

    @property
    def METRICS_TOKEN(self) -> str | None:
        """A secret that lets a scraper read the metrics view with ``Authorization: Bearer
        <token>`` (unset: only staff users and ``WORKERFLOW_METRICS_ALLOW`` may)."""
        return _read("METRICS_TOKEN", None)

    @property
    def METRICS_ALLOW(self) -> str | None:
        """The dotted path of a callable taking the request and returning whether it may
        read the metrics view (unset: only staff users and the bearer token may)."""
        return _read("METRICS_ALLOW", None)

    @property
    def PAYLOAD_CODEC(self) -> str | None:
        """The dotted path of a codec class (``encode``/``decode`` of text) that seals the
        values definitions name ``sensitive`` before they reach the database, e.g.
        ``"django_workerflow.values.fernet.FernetCodec"`` (unset: stored as they are)."""
        return _read("PAYLOAD_CODEC", None)

    @property
    def FERNET_KEYS(self) -> list[str]:
        """The keys of the built-in Fernet codec, newest first: values are sealed with the
        first and opened with any of them (key rotation)."""
        return _read("FERNET_KEYS", [])


settings = Settings()
