"""What the engine logs: one ``key=value`` line per meaningful event, and nothing at INFO
about its own routine django-q2 tasks (an idle cluster writes no line per sweep)."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django_q.tasks import async_task

import django_workerflow as workerflow
from django_workerflow.runtime import sweeping
from django_workerflow.workers import task_lines

pytestmark = pytest.mark.django_db


def flaky(self):
    return self.run("charge", lambda: 1 / 0, max_attempts=3)


def test_a_step_attempt_that_will_be_retried__logs_one_info_line_without_traceback(
    workerflow_harness, define, caplog
):
    instance = workerflow.start(define(flaky))
    with caplog.at_level(logging.INFO, logger="django_workerflow"):
        workerflow_harness.drain()

    [line] = [r for r in caplog.records if "step" in r.getMessage() and "key=" in r.getMessage()]
    message = line.getMessage()
    assert message.startswith(f"step retry scheduled key={instance.key} step=charge attempt=1")
    assert "error=ZeroDivisionError" in message
    assert "retry_at=" in message
    assert "+00:00" in message
    assert line.levelno == logging.INFO
    assert line.exc_info is None


def test_a_retried_attempts_traceback__is_logged_at_debug(workerflow_harness, define, caplog):
    workerflow.start(define(flaky))
    with caplog.at_level(logging.DEBUG, logger="django_workerflow"):
        workerflow_harness.drain()

    [line] = [r for r in caplog.records if r.getMessage().startswith("step attempt traceback")]
    assert line.levelno == logging.DEBUG
    assert line.exc_info is not None
    assert line.exc_info[0] is ZeroDivisionError


def test_a_step_that_fails_for_good__logs_step_failed_and_its_traceback_once(
    workerflow_harness, define, caplog
):
    def execute(self):
        return self.run("charge", lambda: 1 / 0, max_attempts=1)

    instance = workerflow.start(define(execute))
    with caplog.at_level(logging.INFO, logger="django_workerflow"):
        workerflow_harness.drain()

    [line] = [r for r in caplog.records if r.getMessage().startswith("step failed")]
    assert line.getMessage() == (
        f"step failed key={instance.key} step=charge attempt=1 error=ZeroDivisionError"
    )
    assert line.exc_info is None
    assert "step retry scheduled" not in caplog.text
    # Once, on the instance's failure, with the step's error as its cause.
    assert caplog.text.count("ZeroDivisionError: division by zero") == 1
    [failed] = [r for r in caplog.records if r.getMessage().startswith("workflow failed")]
    assert failed.exc_info is not None
    assert isinstance(failed.exc_info[1].__cause__, ZeroDivisionError)


def test_a_wait_that_reaches_its_deadline__logs_wait_timed_out_once(
    workerflow_harness, define, caplog
):
    def execute(self):
        try:
            self.wait("approval", "approved", timeout=60)
        except workerflow.WaitStepTimedOutError:
            return "expired"
        return "approved"

    instance = workerflow.start(define(execute))
    workerflow_harness.drain()
    workerflow_harness.clock.advance(timedelta(seconds=61))
    with caplog.at_level(logging.INFO, logger="django_workerflow"):
        workerflow_harness.drain()

    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("wait timed")]
    assert len(lines) == 1
    assert lines[0].startswith(
        f"wait timed out key={instance.key} step=approval event=approved timeout_at="
    )
    assert lines[0].endswith("+00:00")


def sleeper(self):
    self.sleep("nap", 120)


def sweep_lines(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage().startswith("sweep overdue=")]


def test_a_sweep_that_only_queues_bells_for_alarms_coming_near__logs_at_debug(
    workerflow_harness, define, caplog
):
    workerflow.start(define(sleeper))
    workerflow_harness.drain()  # asleep, its alarm 2 minutes ahead: within the bell horizon
    with caplog.at_level(logging.DEBUG, logger="django_workerflow"):
        assert sweeping.sweep() == 1

    [line] = sweep_lines(caplog)
    assert line.getMessage() == "sweep overdue=0 upcoming=1"
    assert line.levelno == logging.DEBUG


def test_a_sweep_that_rings_overdue_instances__logs_at_info(workerflow_harness, define, caplog):
    workerflow.start(define(sleeper))
    workerflow_harness.drain()
    workerflow_harness.clock.advance(timedelta(minutes=3))  # past the alarm, no tick ran
    with caplog.at_level(logging.INFO, logger="django_workerflow"):
        assert sweeping.sweep() == 1

    [line] = sweep_lines(caplog)
    assert line.getMessage() == "sweep overdue=1 upcoming=0"
    assert line.levelno == logging.INFO


@pytest.fixture
def django_q_output() -> Iterator[io.StringIO]:
    """What django-q2's logger writes at its default level (INFO), through our filter."""
    task_lines.install()
    logger = logging.getLogger(task_lines.DJANGO_Q_LOGGER)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield stream
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def test_django_q2_lines_about_the_engines_tasks__are_not_written_at_info(django_q_output):
    logger = logging.getLogger(task_lines.DJANGO_Q_LOGGER)
    async_task("django_workerflow.tasks.sweep_and_beat", "x", task_name="workerflow sweep")
    logger.info("Process-1 processing workerflow sweep 'django_workerflow.tasks.sweep_and_beat'")
    logger.info("Processed 'django_workerflow.tasks.sweep_and_beat' (workerflow sweep)")
    scheduler("django_workerflow.tasks.sweep", "workerflow sweeper")

    assert django_q_output.getvalue() == ""


def scheduler(func: str, schedule: str) -> None:
    """Log as ``django_q.scheduler.scheduler`` does for a schedule it turned into a task
    (the line names only the schedule; the filter knows it by the enqueue before it)."""
    async_task(func)
    logging.getLogger(task_lines.DJANGO_Q_LOGGER).info(
        "Process-1 created task a-b-c from schedule [%s]", schedule
    )


def test_django_q2_lines_about_other_tasks_and_failures__are_kept(django_q_output):
    logger = logging.getLogger(task_lines.DJANGO_Q_LOGGER)
    scheduler("math.floor", "nightly")
    logger.info("Processed 'math.floor' (a-b-c)")
    logger.error("Failed 'django_workerflow.tasks.tick' (workerflow tick 1) - boom")

    lines = django_q_output.getvalue().splitlines()
    assert lines[0].startswith("INFO Enqueued [")
    assert lines[1:] == [
        "INFO Process-1 created task a-b-c from schedule [nightly]",
        "INFO Processed 'math.floor' (a-b-c)",
        "ERROR Failed 'django_workerflow.tasks.tick' (workerflow tick 1) - boom",
    ]


def test_django_q2_lines_about_the_engines_tasks__show_at_debug(django_q_output):
    logger = logging.getLogger(task_lines.DJANGO_Q_LOGGER)
    logger.setLevel(logging.DEBUG)
    logger.info("Processed 'django_workerflow.tasks.tick' (workerflow tick 7)")

    assert django_q_output.getvalue() == (
        "DEBUG Processed 'django_workerflow.tasks.tick' (workerflow tick 7)\n"
    )


def test_the_app__filters_django_q2s_logger_when_django_starts():
    filters = logging.getLogger(task_lines.DJANGO_Q_LOGGER).filters
    assert [f for f in filters if isinstance(f, task_lines.EngineTaskLines)] != []
