"""A durable backend for Django's tasks framework: every task is an instance of the engine.

``TASKS = {"default": {"BACKEND": "django_workerflow.task_backend.WorkflowTaskBackend"}}``
makes ``@task`` functions run on the engine's workers (django-q2), recorded in the
database: ``enqueue()`` starts an instance of the task's own definition (its name is the
task's module path, see :class:`TaskWorkflow`) whose key is the result id. The instance
runs one durable run step per attempt, so a worker killed mid-attempt leaves the attempt
recorded as interrupted and the next tick runs it again; ``enqueue()`` writes in the
caller's transaction, so a rolled-back caller enqueues nothing.

Statuses: READY while no attempt runs and the task has not finished (queued for a slot,
before its ``run_after``, between attempts), RUNNING while an attempt's step runs,
SUCCESSFUL when the instance completed, FAILED when it failed or was cancelled.

Queues: ``OPTIONS["queues"][name]`` may give a queue ``max_attempts``, ``max_concurrency``
and ``rate_limit``; a queue with a limit is a shared admission gate (see
:func:`django_workerflow.runtime.flow.admission.share_gate`), so the limit holds across every task
function on it and priorities order its waiting tasks (a larger ``Task.priority`` is a
lower engine priority: the engine admits lower first).

On Django 6 this uses ``django.tasks``; on Django 5.2 the ``django-tasks`` backport
(``pip install django-workerflow[tasks]``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import socket
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import django
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone
from django.utils.module_loading import import_string

from django_workerflow import (
    MaxAttemptsExceededError,
    NonRetryableStepError,
    WaitStepTimedOutError,
    WorkerLostError,
    WorkflowInputError,
    registry,
)
from django_workerflow import start as start_instance
from django_workerflow.definition.workflow import WorkflowDefinition
from django_workerflow.engine.failures import INTERRUPTED_ERROR_NAME, worker_lost_message
from django_workerflow.signals import workflow_status_changed
from django_workerflow.values.backoff import Backoff, default_backoff
from django_workerflow.values.clock import in_project_time
from django_workerflow.values.clock import now as clock_now
from django_workerflow.values.control_flow import passes_through
from django_workerflow.values.sealing import open_value
from django_workerflow.values.states import StepEventType, StepState, StepType, WorkflowStatus

if TYPE_CHECKING or django.VERSION >= (6, 0):
    from django.tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskError
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json
else:  # Django 5.2: the django-tasks backport
    from django_tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskError
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started
    from django_tasks.utils import normalize_json

if TYPE_CHECKING:
    from django_workerflow.models import WorkflowInstance

__all__ = ["TaskWorkflow", "WorkflowTaskBackend"]

logger = logging.getLogger(__name__)
T = TypeVar("T")

#: The version of every task definition (a task has no versions of its own).
TASK_VERSION = "1"
#: Step ids: attempt n, and the wait after it.
ATTEMPT_STEP = "attempt-{}"
BACKOFF_STEP = "backoff-{}"
RUN_AFTER_STEP = "run-after"
#: The input ``enqueue()`` writes.
TASK_INPUT_KEYS = frozenset({"enqueued_at", "backend", "queue", "run_after", "args", "kwargs"})
QUEUE_OPTIONS = frozenset({"max_attempts", "max_concurrency", "rate_limit"})
#: The note a failed attempt's exception carries (its traceback shows it): the worker.
WORKER_NOTE = "django.tasks worker={}"
WORKER_NOTE_LINE = re.compile(r"^django\.tasks worker=(\S*)$", re.MULTILINE)
#: Failures of a run step that the task's own exception became (see TaskWorkflow.execute).
STEP_FAILURES = (MaxAttemptsExceededError, NonRetryableStepError, WaitStepTimedOutError)
WORKER_LOST = f"{WorkerLostError.__module__}.{WorkerLostError.__qualname__}"
#: What get_result() reads, in one query: the instance's columns (but its key), then per
#: row one event of its step history (an outer join: a task not started has none).
_INSTANCE_FIELDS = (
    "definition_name",
    "definition_version",
    "status",
    "input",
    "result",
    "finished_at",
    "priority",
    "error_name",
    "error_traceback",
)
#: A step event as the attempts' reader takes it (see _attempts_in).
_EVENT_FIELDS = (
    "type",
    "recorded_at",
    "result",
    "error_name",
    "traceback",
    "step__state",
    "step__type",
)


def worker_id() -> str:
    """This process, as a task result's ``worker_ids`` names it (read when called: the
    workers are forked after the module is imported)."""
    return f"{socket.gethostname()}:{os.getpid()}"[:64]


#: The longest concurrency key the instance's column stores.
GATE_KEY_LENGTH = 255


def gate_key(alias: str, queue_name: str) -> str:
    """The concurrency key of the tasks of one backend's queue. A queue name has no limit
    of its own: a key past the column's length keeps its head and ends with a hash of the
    whole, so two long names never share a gate."""
    key = f"django.tasks:{alias}:{queue_name}"
    if len(key) <= GATE_KEY_LENGTH:
        return key
    digest = hashlib.sha256(key.encode()).hexdigest()
    return f"{key[: GATE_KEY_LENGTH - len(digest) - 1]}#{digest}"


class TaskWorkflow(WorkflowDefinition):
    """The definition of one task function: each attempt is a durable run step.

    Subclasses are made by :meth:`WorkflowTaskBackend.definition_for`, one per task
    function, named by the task's module path. Its input is when the task was enqueued,
    its backend alias, queue, ``run_after``, arguments and keyword arguments. Attempt n is
    the run step ``attempt-n``; its result is the worker, the attempt's start and the
    function's value (the instance's result is the value).
    """

    abstract = True
    version = TASK_VERSION
    #: Starts take admission's path: a queue with a limit is a shared gate.
    shares_gates: ClassVar[bool] = True
    registered_on_demand = True  # by load_definition, from the task's module path

    @classmethod
    def check_input(cls, input: Any) -> None:
        """Refuse an input that ``enqueue()`` did not write: a task is started by
        enqueueing it, never by ``django_workerflow.start()``."""
        if not (isinstance(input, dict) and input.keys() >= TASK_INPUT_KEYS):
            raise WorkflowInputError(
                f"{cls.name!r} is a django.tasks task, not a workflow: enqueue it "
                f"({cls.name.rsplit('.', 1)[-1]}.enqueue(...)) instead of starting its "
                "definition with django_workerflow.start()."
            )

    def concurrency_key(self) -> str:
        return gate_key(self.input["backend"], self.input["queue"])

    def execute(self) -> Any:
        """Run attempts until one succeeds or ``max_attempts`` of them have failed.

        An attempt interrupted by a dying worker is recorded as failed with the engine's
        interruption error: it does not count against ``max_attempts`` and runs again, up to
        ``OPTIONS["max_interrupted_attempts"]`` interrupted attempts in a row, after which the
        task fails with ``WorkerLostError``.
        """
        backend = backend_of(self.input["backend"])
        task = backend.task_of(self.name, self.input)
        if self.input.get("run_after"):
            self.sleep_until(RUN_AFTER_STEP, datetime.fromisoformat(self.input["run_after"]))
        max_attempts, backoff = backend.retries(self.input["queue"])
        failures = interruptions = 0
        attempt = 0
        while True:
            attempt += 1
            try:
                outcome = self.run(
                    ATTEMPT_STEP.format(attempt),
                    partial(backend.call, task, self.key, self.input, attempt),
                    max_attempts=1,
                )
                if attempt == 1:
                    _first_successes.remember(self.key, outcome)
                return outcome["value"]
            except STEP_FAILURES:
                if _failure_name(self.key, ATTEMPT_STEP.format(attempt)) == INTERRUPTED_ERROR_NAME:
                    interruptions += 1
                    if interruptions < backend.max_interrupted_attempts:
                        continue
                    raise WorkerLostError(
                        worker_lost_message(f"The task '{self.name}'", interruptions),
                        step_id=ATTEMPT_STEP.format(attempt),
                    ) from None
                failures += 1
                if failures >= max_attempts:
                    raise
                _last_failures.pop(self.key)  # not the task's last failure: nothing to log
            self.sleep(BACKOFF_STEP.format(failures), (backoff or default_backoff)(failures))


def _failure_name(key: str, step_id: str) -> str:
    """The error name a failed step of instance ``key`` recorded (read on every replay: a
    recorded failure never changes)."""
    # Late: a @task declaration loads this backend, maybe before the app registry is ready.
    from django_workerflow.models import Step

    return (
        Step.objects.filter(instance__key=key, step_id=step_id)
        .values_list("error_name", flat=True)
        .first()
        or ""
    )


def backend_of(alias: str) -> WorkflowTaskBackend:
    """The task backend configured under ``alias``; ImproperlyConfigured if it is not ours."""
    backend = task_backends[alias]
    if not isinstance(backend, WorkflowTaskBackend):
        raise ImproperlyConfigured(
            f"The task backend {alias!r} is a {type(backend).__name__}, not a "
            "WorkflowTaskBackend, but the engine holds tasks enqueued through it. Configure "
            f"TASKS[{alias!r}] with django_workerflow.task_backend.WorkflowTaskBackend."
        )
    return backend


class WorkflowTaskBackend(BaseTaskBackend):
    """A ``django.tasks`` backend whose tasks are durable instances of the engine."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        problems: list[str] = []
        self.max_attempts: int = _attempts(self.options.get("max_attempts", 1), "", problems)
        self.max_interrupted_attempts: int = _attempts(
            self.options.get("max_interrupted_attempts", 3),
            "",
            problems,
            "max_interrupted_attempts",
        )
        self.backoff: Backoff | None = self.options.get("backoff")
        if self.backoff is not None and not callable(self.backoff):
            problems.append("OPTIONS['backoff'] must be a callable of the attempt number")
        self.queue_options: dict[str, dict[str, Any]] = {}
        self.limited_queues: set[str] = set()
        for name, options in (self.options.get("queues") or {}).items():
            self._read_queue(name, options, problems)
        if problems:
            raise ImproperlyConfigured(
                f"The task backend {alias!r} is misconfigured: " + "; ".join(problems) + "."
            )

    def _read_queue(self, name: str, options: Any, problems: list[str]) -> None:
        where = f"OPTIONS['queues'][{name!r}]"
        if not isinstance(options, dict):
            problems.append(f"{where} must be a dict")
            return
        if self.queues and name not in self.queues:
            problems.append(f"{where} names a queue that QUEUES does not list")
        unknown = set(options) - QUEUE_OPTIONS
        if unknown:
            problems.append(f"{where} has unknown keys {sorted(unknown)}")
        if "max_attempts" in options:
            _attempts(options["max_attempts"], where, problems)
        limit = options.get("max_concurrency")
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 1
        ):
            problems.append(f"{where}['max_concurrency'] must be a positive integer")
        rate = options.get("rate_limit")
        if rate is not None and not _valid_rate(rate):
            problems.append(
                f"{where}['rate_limit'] must be (count, timedelta), e.g. (10, timedelta(seconds=1))"
            )
        self.queue_options[name] = options
        if limit is not None or rate is not None:
            # Late: a @task declaration loads this backend, maybe before the app registry is ready.
            from django_workerflow.runtime.flow.admission import Limits, share_gate

            self.limited_queues.add(name)
            share_gate(
                gate_key(self.alias, name),
                Limits(
                    max_concurrency=limit,
                    rate_count=rate[0] if rate else None,
                    rate_period=rate[1] if rate else None,
                ),
            )

    # The framework's contract ---------------------------------------------------------

    def validate_task(self, task: Task[Any, Any]) -> None:
        super().validate_task(task)
        if len(task.module_path) > 200:
            raise InvalidTask(
                f"The task {task.module_path!r} has a module path longer than 200 "
                "characters, which the engine cannot store as a definition name."
            )
        self.definition_for(task)

    def enqueue(self, task: Task[Any, Any], args: Any, kwargs: Any) -> TaskResult[Any, Any]:
        """Start the task's instance (in the caller's transaction, if any) and return its
        result, READY."""
        self.validate_task(task)
        definition = self.definition_for(task)
        run_after = task.run_after
        instance = start_instance(
            definition,
            key=uuid.uuid4().hex,
            input={
                "enqueued_at": clock_now().isoformat(),
                "backend": self.alias,
                "queue": task.queue_name,
                "run_after": _aware(run_after).isoformat() if run_after is not None else None,
                # Arguments that are not JSON raise TypeError here, as Django's backends do.
                "args": normalize_json(list(args)),
                "kwargs": normalize_json(dict(kwargs)),
            },
            # django.tasks runs larger priorities sooner; the engine admits lower first. A
            # whole-number float passes validate_task: the engine stores an integer.
            priority=-int(task.priority),
        )
        result = self._result(task, instance, attempts=[], errors=[])
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult[Any, Any]:
        """The result of the task enqueued as ``result_id``, read from the database in one
        query (the instance and its step history, joined)."""
        # Late: a @task declaration loads this backend, maybe before the app registry is ready.
        from django_workerflow.models import WorkflowInstance
        from django_workerflow.models.history import history_order

        if not _storable_key(result_id):
            raise TaskResultDoesNotExist(result_id)  # no row can have this key
        rows = list(
            WorkflowInstance.objects.filter(key=result_id)
            .values_list(*_INSTANCE_FIELDS, *(f"step_events__{f}" for f in _EVENT_FIELDS))
            .order_by(*history_order("step_events__"))
        )
        if not rows:
            raise TaskResultDoesNotExist(result_id)
        instance = WorkflowInstance(
            key=result_id, **dict(zip(_INSTANCE_FIELDS, rows[0], strict=False))
        )
        definition = registry.lookup(instance.definition_name, instance.definition_version)
        if (
            definition is None
            or not issubclass(definition, TaskWorkflow)
            or not isinstance(instance.input, dict)
            or instance.input.get("backend") != self.alias
        ):
            raise TaskResultDoesNotExist(result_id)
        task = self.task_of(instance.definition_name, instance.input, instance.priority)
        events = (row[len(_INSTANCE_FIELDS) :] for row in rows)
        return self._result(task, instance, *_attempts_in(events))

    def result_of(self, task: Task[Any, Any], instance: WorkflowInstance) -> TaskResult[Any, Any]:
        """The result of ``task``'s ``instance``, with its attempts read from the database."""
        return self._result(task, instance, *_history(instance))

    # For the engine ----------------------------------------------------------------------

    def definition_for(self, task: Task[Any, Any]) -> type[TaskWorkflow]:
        """The definition of ``task``'s function, registered on first use."""
        name = task.module_path
        existing = registry.lookup(name, TASK_VERSION)
        if existing is not None:
            if not issubclass(existing, TaskWorkflow):
                raise InvalidTask(
                    f"The task {name!r} has the name of a workflow definition "
                    f"({existing.__module__}.{existing.__qualname__}); rename one of them."
                )
            return existing
        attrs = {"name": name, "version": TASK_VERSION, "__module__": __name__}
        definition = type(f"Task[{name}]", (TaskWorkflow,), attrs)
        logger.debug("task definition registered name=%s", name)
        return definition

    def task_of(
        self, name: str, task_input: dict[str, Any], priority: int | None = None
    ) -> Task[Any, Any]:
        """The ``Task`` an instance of ``name`` with ``task_input`` (and the engine's
        ``priority``) was enqueued as."""
        declared = import_string(name)
        if not isinstance(declared, Task):
            raise ImproperlyConfigured(
                f"{name!r} is not a task any more (it is a {type(declared).__name__}); an "
                "enqueued task's function must stay where it was, decorated with @task."
            )
        run_after = task_input.get("run_after")
        if (
            run_after is None
            and task_input["queue"] == declared.queue_name
            and declared.backend == self.alias
            and (priority is None or -priority == declared.priority)
        ):
            return declared  # as declared: no copy to validate again
        return declared.using(
            priority=None if priority is None else -priority,
            queue_name=task_input["queue"],
            backend=self.alias,
            run_after=in_project_time(datetime.fromisoformat(run_after)) if run_after else None,
        )

    def retries(self, queue_name: str) -> tuple[int, Backoff | None]:
        """The attempts a task on ``queue_name`` gets, and its backoff."""
        options = self.queue_options.get(queue_name, {})
        return options.get("max_attempts", self.max_attempts), self.backoff

    def call(self, task: Task[Any, Any], key: str, task_input: dict[str, Any], attempt: int) -> Any:
        """Attempt ``attempt``: announce it, call the task function, and return the step's
        result: the worker, the attempt's start and the function's value. Runs as the
        attempt's run step, whose start is already recorded. A failure leaves the worker in
        a note of the exception, which its recorded traceback shows."""
        worker, started = worker_id(), clock_now()
        # A context's attempt number counts the attempts before this one, also those of the
        # same step before a retry() reran it: read them, unless nothing reads them.
        if attempt > 1 or task.takes_context:
            result = self.get_result(key)
            result.worker_ids[-1] = worker  # the running attempt has not recorded it yet
        else:  # the first step, no context: task_started's result is built without a read
            result = TaskResult(
                task=task,
                id=key,
                status=TaskResultStatus.RUNNING,
                enqueued_at=in_project_time(datetime.fromisoformat(task_input["enqueued_at"])),
                started_at=in_project_time(started),
                last_attempted_at=in_project_time(started),
                finished_at=None,
                args=task_input["args"],
                kwargs=task_input["kwargs"],
                backend=self.alias,
                errors=[],
                worker_ids=[worker],
            )
        task_started.send(type(self), task_result=result)
        args, kwargs = task_input["args"], task_input["kwargs"]
        try:
            if task.takes_context:
                value = task.call(TaskContext(task_result=result), *args, **kwargs)
            else:
                value = task.call(*args, **kwargs)
            # A value that is not JSON fails the attempt with TypeError, as Django's
            # backends record it.
            value = normalize_json(value)
        except BaseException as exc:  # exit() fails the attempt too (see passes_through)
            if not passes_through(exc):
                exc.add_note(WORKER_NOTE.format(worker))
                _last_failures.remember(key, exc)
            raise
        return {"worker": worker, "started_at": started.isoformat(), "value": value}

    def _result(
        self,
        task: Task[Any, Any],
        instance: WorkflowInstance,
        attempts: list[tuple[str, datetime, str]],
        errors: list[TaskError],
    ) -> TaskResult[Any, Any]:
        """A ``TaskResult`` of ``instance``; ``attempts`` holds (worker, start, step state)
        per started attempt."""
        status = _status(instance.status, attempts[-1][2] if attempts else None)
        task_input: dict[str, Any] = instance.input or {}
        result: TaskResult[Any, Any] = TaskResult(
            task=task,
            id=instance.key,
            status=status,
            enqueued_at=in_project_time(datetime.fromisoformat(task_input["enqueued_at"])),
            started_at=in_project_time(attempts[0][1]) if attempts else None,
            last_attempted_at=in_project_time(attempts[-1][1]) if attempts else None,
            finished_at=in_project_time(instance.finished_at) if instance.finished_at else None,
            args=task_input["args"],
            kwargs=task_input["kwargs"],
            backend=self.alias,
            errors=errors,
            worker_ids=[worker for worker, _at, _state in attempts],
        )
        if instance.status == WorkflowStatus.COMPLETED:
            object.__setattr__(result, "_return_value", open_value(instance.result))
        elif instance.error_name == WorkerLostError.__name__ and not errors:  # none raised it
            errors.append(
                TaskError(exception_class_path=WORKER_LOST, traceback=instance.error_traceback)
            )
        return result


def _storable_key(result_id: Any) -> bool:
    """Whether ``result_id`` could be an instance's key: a string the database can compare
    (no NUL, which PostgreSQL refuses in text, no lone surrogate, which no encoding takes)
    within the column's length."""
    if not isinstance(result_id, str) or "\x00" in result_id or len(result_id) > 255:
        return False
    try:
        result_id.encode()
    except UnicodeEncodeError:
        return False
    return True


def _aware(moment: datetime) -> datetime:
    """``moment``, aware: a naive ``run_after`` (which Django accepts when ``USE_TZ`` is
    False) is in the current time zone, as Django reads naive datetimes then."""
    return moment if timezone.is_aware(moment) else timezone.make_aware(moment)


def _status(instance_status: str, attempt_state: str | None) -> TaskResultStatus:
    if instance_status == WorkflowStatus.COMPLETED:
        return TaskResultStatus.SUCCESSFUL
    if instance_status in (WorkflowStatus.FAILED, WorkflowStatus.CANCELLED):
        return TaskResultStatus.FAILED
    if instance_status == WorkflowStatus.RUNNING and attempt_state == StepState.RUNNING:
        return TaskResultStatus.RUNNING
    return TaskResultStatus.READY


def _history(
    instance: WorkflowInstance,
) -> tuple[list[tuple[str, datetime, str]], list[TaskError]]:
    """The started attempts of a task's instance and the errors of those that failed, read
    from its step history in one query (see :func:`_attempts_in`)."""
    # Late: a @task declaration loads this backend, maybe before the app registry is ready.
    from django_workerflow.models import StepEvent

    return _attempts_in(StepEvent.objects.filter(instance=instance).values_list(*_EVENT_FIELDS))


def _attempts_in(
    events: Iterable[tuple[Any, ...]],
) -> tuple[list[tuple[str, datetime, str]], list[TaskError]]:
    """The started attempts (worker, start, state) of a task and the errors of those that
    failed, from its step ``events`` in history order, each as :data:`_EVENT_FIELDS` (other
    steps' events and rows without an event are skipped): every attempt, also those a
    ``retry()`` ran again in the step of an earlier one (its attempt numbers continue).

    A succeeded attempt's result names its worker and start; a failed one's worker is in
    its traceback's note; an interrupted attempt raised nothing and recorded nothing: its
    worker is unknown (""). An attempt not ended yet has its step's state."""
    attempts: list[tuple[str, datetime, str]] = []
    errors: list[TaskError] = []
    for event_type, at, outcome, error_name, text, step_state, step_type in events:
        if step_type != StepType.RUN:
            continue
        if event_type == StepEventType.ATTEMPT_STARTED:
            attempts.append(("", at, step_state))
        elif not attempts:
            continue  # an end without a start: not an attempt this reader can place
        elif event_type == StepEventType.ATTEMPT_SUCCEEDED:
            if isinstance(outcome, dict):
                attempts[-1] = (
                    outcome["worker"],
                    datetime.fromisoformat(outcome["started_at"]),
                    StepState.SUCCEEDED,
                )
            else:
                attempts[-1] = (attempts[-1][0], attempts[-1][1], StepState.SUCCEEDED)
        elif event_type == StepEventType.ATTEMPT_FAILED:
            note = WORKER_NOTE_LINE.findall(text)
            worker = note[-1] if note else attempts[-1][0]
            attempts[-1] = (worker, attempts[-1][1], StepState.FAILED)
            if error_name != INTERRUPTED_ERROR_NAME:
                errors.append(
                    TaskError(
                        exception_class_path=exception_class_path(error_name, text), traceback=text
                    )
                )
    return attempts, errors


def exception_class_path(error_name: str, traceback_text: str) -> str:
    """The dotted path of the class that raised, read off its formatted traceback: Python
    writes the exception line as ``module.Class: message`` (builtins: ``Class: message``);
    the engine records only the class name."""
    for line in reversed(traceback_text.splitlines()):
        head = line.split(":", 1)[0].strip()
        if head == error_name:
            return f"builtins.{error_name}"
        if head.endswith(f".{error_name}") and " " not in head:
            return head
    return f"builtins.{error_name}"


def _attempts(value: Any, where: str, problems: list[str], option: str = "max_attempts") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        key = f"{where}[{option!r}]" if where else f"OPTIONS[{option!r}]"
        problems.append(f"{key} must be a positive integer, not {value!r}")
        return 1
    return value


def _valid_rate(rate: Any) -> bool:
    return (
        isinstance(rate, tuple)
        and len(rate) == 2
        and isinstance(rate[0], int)
        and not isinstance(rate[0], bool)
        and rate[0] >= 1
        and isinstance(rate[1], timedelta)
        and rate[1] > timedelta(0)
    )


def load_definition(name: str) -> None:
    """A registry loader: register the definition of the task at module path ``name``
    (a worker that has not imported the task's module yet)."""
    if name in _not_tasks or "." not in name:
        return
    try:
        declared = import_string(name)
    except ImportError:
        _not_tasks.add(name)
        return
    if isinstance(declared, Task) and isinstance(declared.get_backend(), WorkflowTaskBackend):
        backend_of(declared.backend).definition_for(declared)
    else:
        _not_tasks.add(name)


_not_tasks: set[str] = set()


class _Unannounced(Generic[T]):
    """What this process learned of tasks whose finish is not announced yet, by key.
    Bounded: an instance whose finish never commits falls out after a while."""

    SIZE = 1_000

    def __init__(self) -> None:
        self._values: OrderedDict[str, T] = OrderedDict()

    def remember(self, key: str, value: T) -> None:
        self._values[key] = value
        while len(self._values) > self.SIZE:
            self._values.popitem(last=False)

    def pop(self, key: str) -> T | None:
        return self._values.pop(key, None)


#: The first attempt's outcome of tasks whose first attempt succeeded here, so that
#: ``task_finished`` is sent without reading the history again.
_first_successes: _Unannounced[dict[str, Any]] = _Unannounced()
#: The exception of each task's latest attempt that failed here, so that ``task_finished``
#: for a failed task is sent while it is being handled, as Django's backends send it.
_last_failures: _Unannounced[BaseException] = _Unannounced()


def _announce_finished(sender: Any, instance: WorkflowInstance, **kwargs: Any) -> None:
    """``workflow_status_changed`` receiver: a task's instance finished (committed), so the
    task did: send ``task_finished``. For a task whose last attempt failed in this process,
    it is sent inside an ``except`` block of that exception: Django's receiver logs the
    exception it finds in ``sys.exc_info()``."""
    # Late: a @task declaration loads this backend, maybe before the app registry is ready.
    from django_workerflow.models import TERMINAL_STATUSES

    if not (isinstance(sender, type) and issubclass(sender, TaskWorkflow)):
        return
    if kwargs.get("status") not in TERMINAL_STATUSES:
        return
    task_input: dict[str, Any] = instance.input or {}
    backend = backend_of(task_input["backend"])
    task = backend.task_of(instance.definition_name, task_input, instance.priority)
    outcome = _first_successes.pop(instance.key)
    failure = _last_failures.pop(instance.key)
    if outcome is not None and instance.status == WorkflowStatus.COMPLETED:
        started = datetime.fromisoformat(outcome["started_at"])
        attempts: list[tuple[str, datetime, str]] = [
            (outcome["worker"], started, StepState.SUCCEEDED)
        ]
        result = backend._result(task, instance, attempts=attempts, errors=[])  # noqa: SLF001 - the backend's own status hook
    else:
        result = backend.result_of(task, instance)
    if failure is None or result.status != TaskResultStatus.FAILED:
        task_finished.send(type(backend), task_result=result)
        return
    try:
        raise failure
    except type(failure):
        task_finished.send(type(backend), task_result=result)


workflow_status_changed.connect(_announce_finished, dispatch_uid="workerflow-task-finished")


def install() -> Callable[[str], None]:
    """Let the registry define a task's definition on demand (called by the app's
    ``ready()`` when ``TASKS`` uses this backend)."""
    registry.add_loader(load_definition)
    return load_definition
