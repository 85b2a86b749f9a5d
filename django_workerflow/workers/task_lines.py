"""django-q2's per-task log lines about the engine's own tasks, logged at DEBUG.

django-q2 logs three INFO lines for every task it runs ("Enqueued", "processing",
"Processed"), and one more for each task a schedule creates. The engine's tasks (bells,
ticks, the sweeper's chain every ``WORKERFLOW_SWEEP_SECONDS``, deliveries, schedule bells)
would make an idle cluster write dozens of lines a minute; what they did worth knowing, the
engine logs itself, one ``key=value`` line per event. So a filter on django-q2's logger
turns those lines into DEBUG records: they show with ``Q_CLUSTER["log_level"] = "DEBUG"``
and are dropped otherwise. Other tasks' lines, and every warning and error (a failed task),
are left as they are.

The "Enqueued" and "created task" lines do not name the task: the ``pre_enqueue`` signal,
sent just before them in the same thread, says whose the next ones are.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

#: The logger django-q2 logs everything through.
DJANGO_Q_LOGGER = "django-q"
#: Every django-q2 task the engine enqueues lives in this module.
ENGINE_TASKS = "django_workerflow.tasks."

_state = threading.local()


class EngineTaskLines(logging.Filter):
    """Demote django-q2's INFO lines about the engine's own tasks to DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.INFO or not _is_engine_task_line(record):
            return True
        record.levelno = logging.DEBUG
        record.levelname = logging.getLevelName(logging.DEBUG)
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


def _is_engine_task_line(record: logging.LogRecord) -> bool:
    if record.funcName in ("async_task", "scheduler"):
        # "Enqueued [...] id" and "... created task ... from schedule [...]".
        return bool(getattr(_state, "engine_task", False))
    # "... processing <name> '<func>'" and "Processed '<func>' (<name>)".
    return ENGINE_TASKS in record.getMessage()


def note_enqueue(task: dict[str, Any] | None = None, **_: Any) -> None:
    """django-q2's ``pre_enqueue``: remember whether the task about to be logged is ours."""
    func = (task or {}).get("func")
    _state.engine_task = isinstance(func, str) and func.startswith(ENGINE_TASKS)


def install() -> None:
    """Filter django-q2's logger (once per process) and follow its enqueues."""
    # Late: django_q may not be an installed app, and its Conf reads Q_CLUSTER on import.
    from django_q.signals import pre_enqueue

    logger = logging.getLogger(DJANGO_Q_LOGGER)
    if not any(isinstance(existing, EngineTaskLines) for existing in logger.filters):
        logger.addFilter(EngineTaskLines())
    pre_enqueue.connect(note_enqueue, dispatch_uid="workerflow-task-lines")
