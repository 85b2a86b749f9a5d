"""The base class users subclass to define a workflow, and its step helpers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from django_workerflow import registry
from django_workerflow.definition import options
from django_workerflow.engine.execution import Execution
from django_workerflow.exceptions import (
    WorkflowDefinitionError,
    WorkflowInputError,
    WorkflowStateError,
)
from django_workerflow.values import jsonvalue, storable
from django_workerflow.values.backoff import Backoff
from django_workerflow.values.clock import now as clock_now
from django_workerflow.values.settled import SettledResult

if TYPE_CHECKING:
    from django_workerflow.values.outcome import Outcome


class WorkflowDefinition:
    """A workflow: subclass it, set ``name`` (and ``version``), and write ``execute()``.

    ``execute()`` is replayed from the top after every suspension. Steps it has already
    completed return their recorded outcome instead of running again, so everything that
    has side effects or reads the outside world (the clock included) belongs in a step.
    Subclasses register themselves when they are created; set ``abstract = True`` on a base
    class that only shares code.
    """

    name: ClassVar[str]
    version: ClassVar[str] = "1"
    abstract: ClassVar[bool] = True
    #: A cron string ("0 3 * * *") to start an instance at each occurrence; None: never.
    schedule: ClassVar[str | None] = None
    #: The time zone the cron is read in (None: settings.TIME_ZONE).
    schedule_timezone: ClassVar[str | None] = None
    #: After downtime, start every missed occurrence (bounded), not only the latest.
    schedule_catch_up: ClassVar[bool] = False
    #: At most this many instances of the workflow hold a slot at once; None: no limit.
    max_concurrency: ClassVar[int | None] = None
    #: ``(count, period)``: at most ``count`` admissions per ``period``; None: no limit.
    rate_limit: ClassVar[tuple[int, timedelta] | None] = None
    #: Seconds or a timedelta: a start under a key whose instance has not started its
    #: first step replaces the input and moves the first tick to now + this. None: off.
    debounce: ClassVar[float | timedelta | None] = None
    #: Seconds or a timedelta: the most a debounce delays the first tick from the first
    #: start. None: no bound.
    max_debounce: ClassVar[float | timedelta | None] = None
    #: A registry loader registers it in any process on first use (a django.tasks task's
    #: definition): no module a worker imports needs to define it (check W011).
    registered_on_demand: ClassVar[bool] = False
    #: The time limit of each attempt of this definition's run steps (seconds or a
    #: timedelta) when ``run()`` gives none; None: no limit.
    step_timeout: ClassVar[float | timedelta | None] = None
    #: How long an instance may run (seconds or a timedelta), paused time not counted:
    #: one not finished by then fails with ``WorkflowTimeoutError``. ``start(timeout=...)``
    #: overrides it for one instance. None: no limit.
    timeout: ClassVar[float | timedelta | None] = None
    #: The attributes (``set_attributes()``) the admin's instance list offers a filter for,
    #: e.g. ``["customer", "region"]``: each lists the values of this definition's most
    #: recent instances.
    attribute_filters: ClassVar[list[str] | tuple[str, ...]] = ()
    #: Dotted paths of the values shown masked to readers without the permission
    #: ``view_sensitive_payloads``: "input.card", "result.token", "events.payment.card",
    #: "steps.charge.card_last4" (see :mod:`django_workerflow.values.masking`).
    sensitive: ClassVar[Sequence[str]] = ()

    def __init_subclass__(cls, *, register: bool = True, **kwargs: Any) -> None:
        # ``class Changed(WorkflowDefinition, register=False)``: checked, not registered
        # (tests register it for a while with testing.registered()).
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("abstract", False):
            return
        cls.abstract = False
        problems = []
        name = getattr(cls, "name", None)
        if not isinstance(name, str) or not name.strip():
            problems.append("set `name` to a non-empty string (the name start() is called with)")
        elif len(name) > 200:
            problems.append("shorten `name` to at most 200 characters")
        elif storable.problem(name):
            problems.append(f"make `name` storable: it {storable.problem(name)}")
        if not isinstance(cls.version, str) or not cls.version.strip():
            problems.append("set `version` to a non-empty string such as '1' or '2026-03-19'")
        elif len(cls.version) > 100:
            problems.append("shorten `version` to at most 100 characters")
        elif storable.problem(cls.version):
            problems.append(f"make `version` storable: it {storable.problem(cls.version)}")
        if cls.execute is WorkflowDefinition.execute:
            problems.append("implement `execute(self)`")
        if problems:
            raise WorkflowDefinitionError(
                f"Workflow definition {cls.__module__}.{cls.__qualname__} is incomplete: "
                + "; ".join(problems)
                + ". Mark a base class that only shares code with `abstract = True`."
            )
        option_problems = options.problems(cls)
        if option_problems:
            raise WorkflowDefinitionError(
                f"Workflow definition {cls.__module__}.{cls.__qualname__} is misconfigured: "
                + "; ".join(option_problems)
                + "."
            )
        if register:
            registry.register(cls)

    def __init__(self, *, key: str, input: Any, execution: Execution | None = None) -> None:
        self.key = key
        self.input = input
        self._execution = execution

    def concurrency_key(self) -> str:
        """The key ``max_concurrency`` and ``rate_limit`` count per (it may read
        ``self.input``); the default "" makes them count per workflow name."""
        return ""

    def execute(self) -> Any:
        """The workflow's body; its return value (JSON) becomes the instance's result."""
        raise NotImplementedError

    def on_finish(self, outcome: Outcome) -> None:
        """Hear that an instance finished (completed, failed or cancelled): override it.

        Called at least once per finish, outside the finishing transaction, and retried
        with backoff until it returns; use ``outcome.id`` as an idempotency key. The base
        class's does nothing, and no delivery is created for a definition that keeps it.
        """

    @classmethod
    def check_input(cls, input: Any) -> None:
        """Refuse, with :class:`WorkflowInputError`, an input that this definition cannot
        run, before an instance is created; called by ``start()`` and ``start_many()``.
        The base class's accepts any JSON value."""

    @classmethod
    def hears_finish(cls) -> bool:
        """Whether the definition overrides :meth:`on_finish` (its finishes are delivered)."""
        return cls.on_finish is not WorkflowDefinition.on_finish

    # Step helpers ----------------------------------------------------------------------

    def run(
        self,
        step_id: str,
        fn: Callable[[], Any],
        *,
        max_attempts: int = 3,
        backoff: Backoff | None = None,
        atomic: bool = False,
        timeout: float | timedelta | None = None,
    ) -> Any:
        """Run ``fn`` once durably and return its (JSON round-tripped) result.

        A failing ``fn`` is retried up to ``max_attempts`` attempts in all, waiting
        ``backoff(attempt)`` between attempts (default 0.25 s doubling up to 10 s). Raise
        :class:`~django_workerflow.exceptions.NonRetryableStepError` to fail at once. Steps are
        at-least-once: a crash after ``fn`` ran but before its result committed runs it again. With
        ``atomic=True``, ``fn`` runs inside the transaction that records its result, so its database
        writes happen exactly once.

        ``timeout`` (seconds or a timedelta; None: the definition's ``step_timeout``) limits
        each attempt: one that runs longer is interrupted and fails with
        :class:`~django_workerflow.exceptions.StepTimeoutError`, then is retried like any failure.
        See "Step timeouts" in docs/concepts.md for which callbacks can be interrupted and which end
        with their worker's process timeout. Raises :class:`WorkflowInputError` for a timeout that
        is not a positive number of seconds or timedelta.
        """
        return self._current().run(
            step_id,
            fn,
            max_attempts=max_attempts,
            backoff=backoff,
            atomic=atomic,
            timeout=type(self).step_timeout if timeout is None else timeout,
        )

    def sleep(self, step_id: str, duration: float | timedelta) -> None:
        """Suspend for ``duration`` (seconds or a timedelta), measured from the first reach."""
        self._current().sleep(step_id, duration)

    def sleep_until(self, step_id: str, when: datetime) -> None:
        """Suspend until ``when`` (a timezone-aware datetime)."""
        self._current().sleep_until(step_id, when)

    def wait(
        self,
        step_id: str,
        event_name: str,
        *,
        timeout: float | timedelta | None = None,
        timeout_at: datetime | None = None,
    ) -> Any:
        """Suspend until an event named ``event_name`` arrives and return its payload.

        Raises :class:`~django_workerflow.exceptions.WaitStepTimedOutError` once ``timeout`` (from
        the first reach) or ``timeout_at`` passes first.
        """
        execution = self._current()
        if timeout is not None and timeout_at is not None:
            raise WorkflowInputError(
                f"Wait step '{step_id}' got both timeout and timeout_at; pass only one."
            )
        if timeout is not None:
            timeout_at = execution.wait_deadline(step_id, timeout)
        elif timeout_at is not None:
            jsonvalue.check_aware(timeout_at, what=f"The timeout_at of wait step '{step_id}'")
        return execution.wait(step_id, event_name, timeout_at)

    def all(self, *branches: Callable[[], Any]) -> list[Any]:
        """Run every branch as far as it can go; return their results in order.

        Raises the first branch failure; suspends while any branch still waits.
        """
        return self._current().all(branches)

    def all_settled(self, *branches: Callable[[], Any]) -> list[SettledResult]:
        """Like :meth:`all`, but return each branch's outcome (``ok``, ``value``, ``error``)
        once every branch has settled."""
        return self._current().all_settled(branches)

    def child(
        self,
        step_id: str,
        workflow: str | type[WorkflowDefinition],
        *,
        input: Any = None,
        key: str | None = None,
        version: str | None = None,
    ) -> Any:
        """Start the child workflow once, suspend until it finishes, return its result.

        ``key`` defaults to ``f"{self.key}/{step_id}"``; starting follows ``start()``. A
        child that failed raises :class:`~django_workerflow.exceptions.WorkflowFailedError`
        (cancelled: :class:`~django_workerflow.exceptions.WorkflowCancelledError`).
        """
        return self._current().child(step_id, workflow, input=input, key=key, version=version)

    def start_child(
        self,
        step_id: str,
        workflow: str | type[WorkflowDefinition],
        *,
        input: Any = None,
        key: str | None = None,
        version: str | None = None,
        detached: bool = False,
    ) -> str:
        """Start the child workflow once and return its key without waiting.

        A ``detached`` child is not cancelled with its parent.
        """
        return self._current().start_child(
            step_id, workflow, input=input, key=key, version=version, detached=detached
        )

    def wait_child(self, step_id: str, key: str) -> Any:
        """Suspend until the instance ``key`` (a child or any other) finishes; return its
        result, or raise as :meth:`child` does."""
        return self._current().wait_child(step_id, key)

    def patched(self, change_id: str) -> bool:
        """True where this instance runs the code of change ``change_id`` for the first time,
        False where its recorded history already went past this point without it.

        The answer is recorded (a marker step), so every replay gets the same one:
        ``if self.patched("new-fee"): new code, else: old code``. See
        :meth:`Execution.patched <django_workerflow.engine.execution.Execution.patched>` for how the
        first answer is decided.
        """
        return self._current().patched(change_id)

    def set_progress(
        self, current: float, total: float | None = None, *, message: str = ""
    ) -> None:
        """Report how far the instance has come: ``current`` of ``total`` (None: no known
        total), with a short ``message``; readers see it as ``instance.progress`` and wait
        for it with :func:`django_workerflow.wait_progress`. Returns None.

        Call it in ``execute()`` or in a step's callback. It is not a step: it needs no id,
        replays make the same calls again without writing anything, and changing the calls
        is never drift. The value is written with the pass's next step write or when the
        pass ends, in that transaction (no commit of its own); a pass's last call wins.

        Raises :class:`WorkflowInputError` at the call, keeping the last good value, for a
        ``current`` or ``total`` that is not a finite number between 0 and 2**53, a
        ``current`` greater than ``total``, or a ``message`` that is not a storable string
        of at most :data:`~django_workerflow.values.progress.MAX_MESSAGE_LENGTH` (2,000)
        characters; :class:`WorkflowStateError` outside an execution.
        """
        self._current().set_progress(current, total, message)

    def set_attributes(self, **attributes: str | int | float | bool | None) -> None:
        """Set searchable attributes of the instance: ``set_attributes(customer="c-42",
        region="eu")``; ``None`` removes one. Returns None.

        Readers find the instance with ``WorkflowInstance.objects.filter(
        attributes__customer="c-42")``, in the admin (search and list filters) and with
        ``manage.py workerflow list --attr customer=c-42``. Call it in ``execute()`` or in a
        step's callback; base the values on the input or on steps' results, so that every
        replay sets the same ones. It is not a step: it needs no id, a replay that sets what
        the row holds writes nothing, and changing the calls is never drift. The values are
        written with the pass's next step write or when the pass ends, in that transaction
        (no commit of its own); the last value set wins, and attributes not named keep theirs.

        Raises :class:`WorkflowInputError` at the call, setting nothing, for a name that is
        not an identifier (or is reserved), a value that is not a string (of at most 200
        characters), a finite number (an integer within 2**53) or a boolean, or more than
        20 attributes in all (:mod:`django_workerflow.values.attributes`);
        :class:`WorkflowStateError` outside an execution.
        """
        self._current().set_attributes(dict(attributes))

    def now(self) -> datetime:
        """The engine's clock. It is not recorded: capture times you branch on in a step."""
        return clock_now()

    def _current(self) -> Execution:
        if self._execution is None:
            raise WorkflowStateError(
                "Step helpers only work while the engine executes this definition; start "
                "the workflow with django_workerflow.start() instead of calling execute()."
            )
        return self._execution


def resolve(
    definition: str | type[WorkflowDefinition], version: str | None, *, caller: str
) -> tuple[str, str | None, type[WorkflowDefinition]]:
    """The workflow name, the version asked for (None: the default) and the registered class
    that ``caller`` was asked to start: a definition class (its own version unless
    ``version`` is given) or a registered name."""
    if isinstance(definition, type) and issubclass(definition, WorkflowDefinition):
        name = definition.name
        version = definition.version if version is None else version
    elif isinstance(definition, str):
        name = definition
    else:
        raise WorkflowInputError(
            f"{caller} takes a definition name or class, not {type(definition).__name__}."
        )
    return name, version, registry.get(name, version)
