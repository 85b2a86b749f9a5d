"""Every hand-written SQL statement of the engine, by name.

Each named statement is written once, with ``%(name)s`` parameters, and declares which
database runs it (:data:`_DIALECTS`): PostgreSQL only, SQLite only, or both. A text SQLite
runs is written as PostgreSQL's, its casts (``::bigint``) removed. Asking for a
statement in a dialect it is not declared for raises. States, statuses and event types are
parameters too (:data:`STATE_PARAMS`), never literals. Where the two databases need
different statements (PostgreSQL's data-modifying CTEs do in one round trip what SQLite does
in two statements), each is declared for its own.

The fence conditions (:data:`LEASE_HELD`, :data:`LEASE_HELD_RUNNING`, :data:`RENEW_LEASE_SET`)
are written here once and used by every statement that checks or renews a lease; see
:mod:`django_workerflow.store.lease` for the invariant they enforce. :mod:`.executor` runs them
(prepared on PostgreSQL). Their full texts, for each database that runs them, are checked in
under ``tests/sql/`` and kept current by ``tests/store/test_sql_texts.py``.
"""

from __future__ import annotations

import enum
import re
from functools import cache
from typing import Any

from django_workerflow.models import (
    DefinitionPause,
    InboundEvent,
    Step,
    StoredStepEvent,
    WorkflowEvent,
    WorkflowInstance,
)
from django_workerflow.store.records import STEP_FIELDS
from django_workerflow.values.states import StepEventType, StepState, StepType, WorkflowStatus

INSTANCE = WorkflowInstance._meta.db_table
STEP = Step._meta.db_table
STEP_EVENT = StoredStepEvent._meta.db_table
INBOUND = InboundEvent._meta.db_table
WORKFLOW_EVENT = WorkflowEvent._meta.db_table
DEFINITION_PAUSE = DefinitionPause._meta.db_table

#: Every column of an instance, in the model's field order (a read builds the model from it).
INSTANCE_COLUMNS = tuple(str(f.column) for f in WorkflowInstance._meta.concrete_fields)
#: The columns of a step the tick reads, in :class:`~.records.StepRecord`'s field order.
STEP_COLUMNS = STEP_FIELDS

#: The states, statuses and event types the statements compare with or write.
STATE_PARAMS: dict[str, str] = {
    "status_running": WorkflowStatus.RUNNING,
    "status_completed": WorkflowStatus.COMPLETED,
    "status_failed": WorkflowStatus.FAILED,
    "status_cancelled": WorkflowStatus.CANCELLED,
    "type_child": StepType.CHILD,
    "type_run": StepType.RUN,
    "state_pending": StepState.PENDING,
    "state_running": StepState.RUNNING,
    "state_succeeded": StepState.SUCCEEDED,
    "state_waiting": StepState.WAITING,
    "state_satisfied": StepState.SATISFIED,
    "type_wait": StepType.WAIT,
    "event_attempt_succeeded": StepEventType.ATTEMPT_SUCCEEDED,
    "event_wait_satisfied": StepEventType.WAIT_SATISFIED,
}

# The fence --------------------------------------------------------------------------------

#: The instance row is leased by this token.
LEASE_HELD = "id = %(instance)s::bigint AND lease_token = %(token)s::varchar"
#: The instance's definition is paused (a :class:`~django_workerflow.models.DefinitionPause`
#: row names it; an index lookup on a table of a few rows).
DEFINITION_PAUSED = (
    f"EXISTS (SELECT 1 FROM {DEFINITION_PAUSE} "
    f"WHERE {DEFINITION_PAUSE}.definition_name = {INSTANCE}.definition_name)"
)
#: ... and the instance is running, its definition not paused: starting an attempt or
#: creating a step needs all three.
LEASE_HELD_RUNNING = (
    f"{LEASE_HELD} AND status = %(status_running)s::varchar AND NOT {DEFINITION_PAUSED}"
)
#: A renewal moves the lease expiry, and the alarm only while the instance is running (a
#: paused or cancelled instance keeps the alarm its operator set).
RENEW_LEASE_SET = (
    "lease_expires_at = %(expires)s::timestamptz, alarm_at = CASE WHEN status = "
    "%(status_running)s::varchar THEN %(expires)s::timestamptz ELSE alarm_at END"
)

# The step event, written once -------------------------------------------------------------

#: The columns of a step event, in the order every insert gives them.
STEP_EVENT_COLUMNS = (
    "instance_id",
    "step_id",
    "type",
    "recorded_at",
    "attempt_number",
    "result",
    "error_name",
    "error_message",
    "next_attempt_at",
    "wake_at",
    "event_name",
    "timeout_at",
    "payload",
)
_INSERT_STEP_EVENT = f"INSERT INTO {STEP_EVENT} ({', '.join(STEP_EVENT_COLUMNS)})"


def _event_from(
    source: str,
    event_type: str,
    attempt: str,
    result: str,
    payload: str = "NULL",
    where: str = "",
) -> str:
    """A step event selected from the CTE ``source`` (its ``id`` is the step)."""
    return (
        f"{_INSERT_STEP_EVENT} SELECT %(instance)s::bigint, id, {event_type}, "
        f"%(now)s::timestamptz, {attempt}, {result}, '', '', NULL, NULL, '', NULL, {payload} "
        f"FROM {source}{where}"
    )


_STEP_COLUMNS = (
    "instance_id, step_id, type, state, parent_id, attempt_count, max_attempts, error_name, "
    "error_message, wake_at, event_name, timeout_at, created_at"
)

# A success is stored as an event only on a step written before derived_attempt_events
# (a run step created by this version has it on its row; see Step).
_SUCCEEDED_EVENT = _event_from(
    "done",
    "%(event_attempt_succeeded)s::varchar",
    "%(attempt)s::integer",
    "%(result)s::text",
    where=" WHERE NOT derived_attempt_events",
)

# The statements ---------------------------------------------------------------------------

# A run step starts with its first attempt started, which its row records (no event).
_START_NEW_RUN_TAIL = f"""
        new_step AS (
            INSERT INTO {STEP} ({_STEP_COLUMNS}, derived_attempt_events)
            SELECT id, %(step_id)s::varchar, %(type_run)s::varchar, %(state_running)s::varchar,
                %(parent)s::bigint, 1, %(max_attempts)s::integer, '', '', NULL, '',
                NULL, %(now)s::timestamptz, true
            FROM fence
            RETURNING id
        )"""
# The start marker need not wait for its WAL flush: the outcome's synchronous commit hardens
# it, and only a server crash in between can lose it. set_config(..., true) lasts until the
# end of the transaction, so only the autocommit variants use it (see
# transactions.start_new_run_statement).
_NO_FLUSH = """, no_flush AS (
            SELECT set_config('synchronous_commit', 'off', true)
        )
        SELECT id FROM new_step, no_flush"""
_FLUSH = """
        SELECT id FROM new_step"""
_RENEWING_FENCE = f"""
        WITH fence AS (
            UPDATE {INSTANCE} SET {RENEW_LEASE_SET}
            WHERE {LEASE_HELD_RUNNING}
            RETURNING id
        ),"""
# Only checks the lease: the share lock still waits for a pause or cancel holding the row,
# but writes no new version of the instance row and none of its index entries.
_CHECKING_FENCE = f"""
        WITH fence AS (
            SELECT id FROM {INSTANCE} WHERE {LEASE_HELD_RUNNING} FOR SHARE
        ),"""

# Step N's success and step N+1's start in one statement (one commit): the success is fenced
# by the step row alone, the start also by the lease and the status, and only if the success
# landed. A pause or a lost lease therefore still records the success and starts nothing.
_FUSED_SUCCESS = f"""
        WITH done AS (
            UPDATE {STEP}
            SET state = %(state_succeeded)s::varchar, result = %(result)s::text,
                resolved_at = %(now)s::timestamptz
            WHERE id = %(step)s::bigint AND state = %(state_running)s::varchar
                AND attempt_count = %(attempt)s::integer
            RETURNING id, derived_attempt_events
        ), succeeded AS (
            {_SUCCEEDED_EVENT}
        ),"""
_FUSED_RENEWING_FENCE = f"""
        fence AS (
            UPDATE {INSTANCE} SET {RENEW_LEASE_SET}
            WHERE {LEASE_HELD_RUNNING} AND EXISTS (SELECT 1 FROM done)
            RETURNING id
        ),"""
_FUSED_CHECKING_FENCE = f"""
        fence AS (
            SELECT id FROM {INSTANCE}
            WHERE {LEASE_HELD_RUNNING} AND EXISTS (SELECT 1 FROM done) FOR SHARE
        ),"""
_FUSED_RESULT = """
        SELECT (SELECT count(*) FROM done), (SELECT id FROM new_step)"""

_READ_INSTANCE = (
    f"SELECT {', '.join(INSTANCE_COLUMNS)} FROM {INSTANCE} WHERE id = %(instance)s::bigint"
)
# The claim's read: the row, whether it has steps recorded (a first tick then reads none
# for its replay) and whether its definition is paused, in one statement.
_READ_INSTANCE_FOR_CLAIM = (
    f"SELECT {', '.join(INSTANCE_COLUMNS)}, "
    f"EXISTS (SELECT 1 FROM {STEP} WHERE {STEP}.instance_id = {INSTANCE}.id), "
    f"{DEFINITION_PAUSED} FROM {INSTANCE} WHERE id = %(instance)s::bigint"
)
_READ_INSTANCE_BY_KEY = (
    f'SELECT {", ".join(INSTANCE_COLUMNS)} FROM {INSTANCE} WHERE "key" = %(key)s::varchar'
)
# Whether an instance that just finished has unfinished children to cancel, and instances
# whose child step waits for it (each an index lookup; the rare yes takes the ORM's path).
_FINISH_FOLLOWUPS = f"""
        EXISTS (
            SELECT 1 FROM {INSTANCE} WHERE parent_id = %(instance)s::bigint AND NOT detached
            AND status NOT IN (
                %(status_completed)s::varchar, %(status_failed)s::varchar,
                %(status_cancelled)s::varchar)
        ),
        EXISTS (
            SELECT 1 FROM {STEP} WHERE child_instance_id = %(instance)s::bigint
            AND type = %(type_child)s::varchar AND state = %(state_waiting)s::varchar
        )"""

_PROGRESS_SET = (
    "progress_current = %(progress_current)s::float8, "
    "progress_total = %(progress_total)s::float8, "
    "progress_message = %(progress_message)s::text, "
    "progress_at = %(progress_at)s::timestamptz"
)

# The tick's claim in one statement (PostgreSQL): the row locked and read as the claim's read
# reads it (every column, whether it has steps, whether its definition is paused), and the
# lease taken where every check SQL can make holds: active and due, admitted if pending, no
# live lease, the definition not paused, and no timeout's clock to start (a pending instance
# with a timeout is claimed by Python on the row still locked). A pending instance moves to
# running with its 'started' event. The row returned is the one read, before the claim.
_CLAIM_INSTANCE = f"""
        WITH found AS (
            SELECT {", ".join(INSTANCE_COLUMNS)},
                EXISTS (SELECT 1 FROM {STEP} WHERE {STEP}.instance_id = {INSTANCE}.id)
                    AS has_steps,
                {DEFINITION_PAUSED} AS definition_paused
            FROM {INSTANCE} WHERE id = %(instance)s::bigint FOR UPDATE
        ), claimed AS (
            UPDATE {INSTANCE} AS i SET status = %(status_running)s::varchar,
                lease_token = %(token)s::varchar, lease_expires_at = %(expires)s::timestamptz,
                alarm_at = %(expires)s::timestamptz, alarm_cause = '', wake_requested = false,
                updated_at = CASE WHEN i.status = %(status_pending)s::varchar
                    THEN %(now)s::timestamptz ELSE i.updated_at END
            FROM found
            -- The id as a parameter: joined only to found, the planner may pick the status
            -- and alarm indexes and scan every due instance (a backlog's claims go quadratic).
            WHERE i.id = %(instance)s::bigint AND i.id = found.id
                AND NOT found.definition_paused
                AND i.alarm_at <= %(now)s::timestamptz
                AND (i.status = %(status_running)s::varchar OR (
                    i.status = %(status_pending)s::varchar AND i.admitted_at IS NOT NULL
                    AND i.timeout_seconds IS NULL))
                AND (COALESCE(i.lease_token, '') = '' OR i.lease_expires_at IS NULL
                    OR i.lease_expires_at <= %(now)s::timestamptz)
            RETURNING i.id
        ), started AS (
            INSERT INTO {WORKFLOW_EVENT} (instance_id, type, reason, recorded_at)
            SELECT claimed.id, %(event_started)s::varchar, NULL, %(now)s::timestamptz
            FROM claimed, found WHERE found.status = %(status_pending)s::varchar
        )
        SELECT {", ".join(f"found.{column}" for column in INSTANCE_COLUMNS)}, found.has_steps,
            found.definition_paused, EXISTS (SELECT 1 FROM claimed)
        FROM found"""

# The settle of a completed pass in one statement (PostgreSQL), for the common case: the
# instance still running under this tick's lease, its definition not paused and no
# unreached step noted, moves to completed with its event; the row returned is the one
# written. With a success held in memory, the step's row must still be running that attempt
# for the instance to move, and the success (and its event, for an older row) is recorded
# after the instance's row is locked (the lock order of the settle it replaces).
_COMPLETE_INSTANCE = f"""
        WITH completed AS (
            UPDATE {INSTANCE} SET status = %(status_completed)s::varchar,
                result = %(instance_result)s::text, alarm_at = NULL, alarm_cause = '',
                lease_token = NULL, lease_expires_at = NULL, wake_requested = false,
                updated_at = %(now)s::timestamptz, finished_at = %(now)s::timestamptz
            WHERE {LEASE_HELD_RUNNING} AND unreached_step_ids IS NULL{{step}}
            RETURNING {", ".join(INSTANCE_COLUMNS)}
        ), completed_event AS (
            INSERT INTO {WORKFLOW_EVENT} (instance_id, type, reason, recorded_at)
            SELECT id, %(event_completed)s::varchar, NULL, %(now)s::timestamptz FROM completed
        )"""
_COMPLETE_STEP_RUNNING = f"""
                AND EXISTS (
                    SELECT 1 FROM {STEP} WHERE id = %(step)s::bigint
                    AND state = %(state_running)s::varchar AND attempt_count = %(attempt)s::integer
                )"""
_COMPLETE_SUCCEEDED = f""", done AS (
            UPDATE {STEP}
            SET state = %(state_succeeded)s::varchar, result = %(result)s::text,
                resolved_at = %(now)s::timestamptz
            WHERE id = %(step)s::bigint AND state = %(state_running)s::varchar
                AND attempt_count = %(attempt)s::integer AND EXISTS (SELECT 1 FROM completed)
            RETURNING id, derived_attempt_events
        ), succeeded AS (
            {_SUCCEEDED_EVENT}
        )
        SELECT {", ".join(INSTANCE_COLUMNS)}, (SELECT count(*) FROM done) FROM completed"""

# The wait-deadline rule, written once: a wait step is open to an event strictly before its
# deadline; at its deadline it has timed out, as a tick at the same instant finds.
_WAIT_OPEN = "(timeout_at IS NULL OR timeout_at > %(now)s::timestamptz)"

_STATEMENTS: dict[str, str] = {
    # An instance row, every column (the tick's claim and settle build the model from it).
    "read_instance": _READ_INSTANCE,
    # ... under its row lock (PostgreSQL; SQLite's IMMEDIATE transaction holds the database's).
    "lock_instance": _READ_INSTANCE + " FOR UPDATE",
    # The tick's claim: an instance row, every column, whether it has steps and whether its
    # definition is paused.
    "read_instance_for_claim": _READ_INSTANCE_FOR_CLAIM,
    # ... under its row lock (PostgreSQL).
    "lock_instance_for_claim": _READ_INSTANCE_FOR_CLAIM + " FOR UPDATE",
    # An instance row by its key, every column (send_event(): the lookup and the lock in
    # one statement).
    "read_instance_by_key": _READ_INSTANCE_BY_KEY,
    # ... under its row lock (PostgreSQL).
    "lock_instance_by_key": _READ_INSTANCE_BY_KEY + " FOR UPDATE",
    # Every step of an instance, oldest first (a replay pass reads them once).
    "read_steps": f"""
        SELECT {", ".join(STEP_COLUMNS)} FROM {STEP}
        WHERE instance_id = %(instance)s::bigint ORDER BY created_at, id""",
    # What a finish must follow up (see finishing.py).
    "finish_followups": f"SELECT {_FINISH_FOLLOWUPS}",
    # PostgreSQL: the same, waking the wait_result callers listening (on commit).
    "finish_followups_notify": f"SELECT {_FINISH_FOLLOWUPS}, pg_notify(%(channel)s::text, '')",
    # Renew the lease (and a running instance's alarm); matches nothing once it is lost.
    "renew_lease": f"UPDATE {INSTANCE} SET {RENEW_LEASE_SET} WHERE {LEASE_HELD}",
    # Renew the lease of a running instance, locking its row; nothing if lost or not running.
    "renew_lease_running": (f"UPDATE {INSTANCE} SET {RENEW_LEASE_SET} WHERE {LEASE_HELD_RUNNING}"),
    # Store the instance's progress (set_progress()) with a write of the tick holding its
    # lease; matches nothing once the lease is lost.
    "write_progress": f"UPDATE {INSTANCE} SET {_PROGRESS_SET} WHERE {LEASE_HELD}",
    # PostgreSQL: the same, waking the wait_progress callers listening (on commit).
    "write_progress_notify": f"""
        WITH written AS (
            UPDATE {INSTANCE} SET {_PROGRESS_SET} WHERE {LEASE_HELD} RETURNING id
        ) SELECT pg_notify(%(channel)s::text, '') FROM written""",
    # Store the instance's attributes (set_attributes()) with a write of the tick holding
    # its lease, as the progress is; matches nothing once the lease is lost.
    "write_attributes": (
        f"UPDATE {INSTANCE} SET attributes = %(attributes)s::jsonb WHERE {LEASE_HELD}"
    ),
    # The current lease token of an instance, and whether its definition is paused: why a
    # fenced write matched nothing.
    "lease_token": (
        f"SELECT lease_token, {DEFINITION_PAUSED} FROM {INSTANCE} WHERE id = %(instance)s::bigint"
    ),
    # PostgreSQL: renew the lease, create a run step with attempt 1 started, and its event.
    "start_new_run_renewing": _RENEWING_FENCE + _START_NEW_RUN_TAIL + _FLUSH,
    # ... the same, committed without waiting for the WAL flush (autocommit only).
    "start_new_run_renewing_no_flush": _RENEWING_FENCE + _START_NEW_RUN_TAIL + _NO_FLUSH,
    # PostgreSQL: check the lease, create a run step with attempt 1 started, and its event.
    "start_new_run_checked": _CHECKING_FENCE + _START_NEW_RUN_TAIL + _FLUSH,
    # ... the same, committed without waiting for the WAL flush (autocommit only).
    "start_new_run_checked_no_flush": _CHECKING_FENCE + _START_NEW_RUN_TAIL + _NO_FLUSH,
    # PostgreSQL: record a running attempt's success and start the next run step (renewing
    # the lease), in one synchronous commit; returns (successes recorded, new step or NULL).
    "succeed_and_start_renewing": (
        _FUSED_SUCCESS + _FUSED_RENEWING_FENCE + _START_NEW_RUN_TAIL + _FUSED_RESULT
    ),
    # ... the same, only checking the lease.
    "succeed_and_start_checked": (
        _FUSED_SUCCESS + _FUSED_CHECKING_FENCE + _START_NEW_RUN_TAIL + _FUSED_RESULT
    ),
    # SQLite: create a run step with attempt 1 started if the lease is held and running.
    "start_new_run_sqlite": f"""
        INSERT INTO {STEP} ({_STEP_COLUMNS}, derived_attempt_events)
        SELECT %(instance)s, %(step_id)s, %(type_run)s, %(state_running)s, %(parent)s, 1,
            %(max_attempts)s, '', '', NULL, '', NULL, %(now)s, true
        WHERE EXISTS (SELECT 1 FROM {INSTANCE} WHERE {LEASE_HELD_RUNNING})
        RETURNING id""",
    # PostgreSQL: record the success of a running attempt (and its event, for a row written
    # before derived_attempt_events); fenced by the step row (still running, same attempt),
    # not by the lease. Returns how many rows changed.
    "succeed_run_with_event": _FUSED_SUCCESS.rstrip(",") + " SELECT count(*) FROM done",
    # SQLite: record the success of a running attempt; returns whether the row keeps it
    # (derived_attempt_events), else its event is a second statement.
    "succeed_run": f"""
        UPDATE {STEP} SET state = %(state_succeeded)s, result = %(result)s,
            resolved_at = %(now)s
        WHERE id = %(step)s AND state = %(state_running)s AND attempt_count = %(attempt)s
        RETURNING derived_attempt_events""",
    # Start the next attempt of a pending run step whose retry time has come.
    "start_attempt": f"""
        UPDATE {STEP} SET state = %(state_running)s, attempt_count = %(attempt)s
        WHERE id = %(step)s AND state = %(state_pending)s AND attempt_count = %(previous)s
            AND (next_attempt_at IS NULL OR next_attempt_at <= %(now)s)""",
    # Record a failed attempt: back to pending (a retry) or failed; fenced by the step row.
    "fail_attempt": f"""
        UPDATE {STEP} SET state = %(state)s, error_name = %(error_name)s,
            error_message = %(error_message)s, next_attempt_at = %(next_attempt_at)s,
            resolved_at = %(resolved_at)s
        WHERE id = %(step)s AND state = %(state_running)s AND attempt_count = %(attempt)s""",
    # Resolve a waiting sleep or wait step (elapsed, timed out).
    "resolve_waiting": f"""
        UPDATE {STEP} SET state = %(state)s, resolved_at = %(now)s
        WHERE id = %(step)s AND state = %(state_waiting)s""",
    # Create a sleep or wait step, waiting.
    "insert_step": f"""
        INSERT INTO {STEP} ({_STEP_COLUMNS})
        VALUES (%(instance)s, %(step_id)s, %(type)s, %(state_waiting)s, %(parent)s, 0, NULL,
            '', '', %(wake_at)s, %(event_name)s, %(timeout_at)s, %(now)s)
        RETURNING id""",
    # Append one step event (with a failed attempt's traceback; the CTEs leave it blank).
    "insert_step_event": f"""
        INSERT INTO {STEP_EVENT} ({", ".join(STEP_EVENT_COLUMNS)}, traceback)
        VALUES (%(instance)s, %(step)s, %(type)s, %(now)s,
            %(attempt_number)s, %(result)s, %(error_name)s, %(error_message)s,
            %(next_attempt_at)s, %(wake_at)s, %(event_name)s, %(timeout_at)s, %(payload)s,
            %(traceback)s)""",
    # The state of one step (has an event satisfied a waiting wait meanwhile?).
    "step_state": f"SELECT state FROM {STEP} WHERE id = %(step)s",
    # The oldest unclaimed event of a name, sent before a wait's deadline (if it has one);
    # strictly before: at its deadline a wait has timed out.
    "oldest_queued_event": f"""
        SELECT id, payload FROM {INBOUND}
        WHERE instance_id = %(instance)s AND event_name = %(event_name)s
            AND claimed_at IS NULL
            AND (%(deadline)s IS NULL OR created_at < %(deadline)s)
        ORDER BY created_at, id LIMIT 1""",
    # Satisfy a waiting wait step with an event's payload.
    "satisfy_wait": f"""
        UPDATE {STEP} SET state = %(state_satisfied)s, payload = %(payload)s,
            resolved_at = %(now)s
        WHERE id = %(step)s""",
    # The trace context of the event a wait step received (a traced tick links to it).
    "received_trace_context": f"""
        SELECT trace_context FROM {INBOUND}
        WHERE claimed_by_id = %(step)s::bigint AND trace_context IS NOT NULL""",
    # The earliest waiting wait step of an event's name still open to it (_WAIT_OPEN): the
    # one an event sent now satisfies (send_event's statement does the same in its CTE).
    "open_wait": f"""
        SELECT id FROM {STEP}
        WHERE instance_id = %(instance)s::bigint AND type = %(type_wait)s::varchar
            AND state = %(state_waiting)s::varchar AND event_name = %(event_name)s::varchar
            AND {_WAIT_OPEN}
        ORDER BY created_at, id LIMIT 1""",
    # Mark an inbound event claimed by the wait step it satisfied.
    "claim_event": f"""
        UPDATE {INBOUND} SET claimed_by_id = %(step)s, claimed_at = %(now)s
        WHERE id = %(event)s""",
    # PostgreSQL: the tick's claim, the read and the lease in one statement (see
    # _CLAIM_INSTANCE); the row as read, whether it has steps, whether its definition is
    # paused, and whether the lease was taken.
    "claim_instance": _CLAIM_INSTANCE,
    # PostgreSQL: a completed pass's settle in one statement (see _COMPLETE_INSTANCE); the
    # row written, or none.
    "complete_instance": _COMPLETE_INSTANCE.format(step="")
    + f"""
        SELECT {", ".join(INSTANCE_COLUMNS)} FROM completed""",
    # ... with the success held in memory recorded in it; also answers how many steps
    # recorded it (1, or 0 if the row changed under the lease: the caller rolls back).
    "succeed_and_complete": (
        _COMPLETE_INSTANCE.format(step=_COMPLETE_STEP_RUNNING) + _COMPLETE_SUCCEEDED
    ),
}


class Dialect(enum.StrEnum):
    """Which database runs a statement."""

    #: PostgreSQL only: the text as written.
    POSTGRESQL = "postgresql"
    #: SQLite only: the text without its casts (one that shares the fragments of a
    #: PostgreSQL statement carries theirs).
    SQLITE = "sqlite"
    #: Both: PostgreSQL runs the text as written, SQLite the same text without its casts.
    BOTH = "both"


#: Which database runs each statement of :data:`_STATEMENTS` (one line each: a statement
#: added there is declared here, and :func:`statement` refuses one that is not).
_DIALECTS: dict[str, Dialect] = {
    "read_instance": Dialect.BOTH,
    "lock_instance": Dialect.POSTGRESQL,
    "read_instance_for_claim": Dialect.SQLITE,
    "lock_instance_for_claim": Dialect.POSTGRESQL,
    "read_instance_by_key": Dialect.SQLITE,
    "lock_instance_by_key": Dialect.POSTGRESQL,
    "read_steps": Dialect.BOTH,
    "finish_followups": Dialect.SQLITE,
    "finish_followups_notify": Dialect.POSTGRESQL,
    "renew_lease": Dialect.BOTH,
    "renew_lease_running": Dialect.BOTH,
    "write_progress": Dialect.SQLITE,
    "write_progress_notify": Dialect.POSTGRESQL,
    "write_attributes": Dialect.BOTH,
    "lease_token": Dialect.BOTH,
    "start_new_run_renewing": Dialect.POSTGRESQL,
    "start_new_run_renewing_no_flush": Dialect.POSTGRESQL,
    "start_new_run_checked": Dialect.POSTGRESQL,
    "start_new_run_checked_no_flush": Dialect.POSTGRESQL,
    "succeed_and_start_renewing": Dialect.POSTGRESQL,
    "succeed_and_start_checked": Dialect.POSTGRESQL,
    "start_new_run_sqlite": Dialect.SQLITE,
    "succeed_run_with_event": Dialect.POSTGRESQL,
    "succeed_run": Dialect.SQLITE,
    "start_attempt": Dialect.BOTH,
    "fail_attempt": Dialect.BOTH,
    "resolve_waiting": Dialect.BOTH,
    "insert_step": Dialect.BOTH,
    "insert_step_event": Dialect.BOTH,
    "step_state": Dialect.BOTH,
    "oldest_queued_event": Dialect.BOTH,
    "satisfy_wait": Dialect.BOTH,
    "received_trace_context": Dialect.BOTH,
    "claim_event": Dialect.BOTH,
    "open_wait": Dialect.BOTH,
    "claim_instance": Dialect.POSTGRESQL,
    "complete_instance": Dialect.POSTGRESQL,
    "succeed_and_complete": Dialect.POSTGRESQL,
}


def runs_on(name: str, vendor: str) -> bool:
    """Whether the database ``vendor`` runs the statement ``name``, as it is declared."""
    dialect = _DIALECTS.get(name)
    return dialect is not None and dialect in (Dialect.BOTH, vendor)


class StatementDialectError(LookupError):
    """A statement was asked for in a database its declaration does not name."""


# PostgreSQL: claim the due bells in one statement, lowest priority value first (the engine's
# order: a higher Task.priority is lower), then earliest due; rows another cluster is
# claiming are skipped, not waited for. One more row (NULL, NULL, due, NULL) says when to claim
# next: now if this claim took some and left others due, else when the queue's next bell
# comes due (NULL: none queued); a due row this claim skipped is another cluster's. Each
# read is the first entry of a range of the (key, workerflow_priority, lock) or the (key, lock)
# index. Braces doubled: the text is
# formatted twice (the flush variant here, the queue table at call time).
_CLAIM_DUE_BELLS = """
        WITH claimed AS (
            UPDATE {{queue}} AS q SET "lock" = %(until)s
            FROM (
                SELECT id, "lock" AS due, workerflow_priority AS priority FROM {{queue}}
                WHERE "key" = %(key)s AND "lock" < %(now)s
                ORDER BY workerflow_priority, "lock", id LIMIT %(limit)s FOR UPDATE SKIP LOCKED
            ) AS d
            WHERE q.id = d.id RETURNING q.id, q.payload, d.due, d.priority
        ){no_flush}
        SELECT id, payload, due, priority FROM claimed
        UNION ALL
        SELECT NULL, NULL, CASE
            WHEN EXISTS (SELECT FROM claimed) AND EXISTS (
                SELECT FROM {{queue}} WHERE "key" = %(key)s AND "lock" < %(now)s
                AND id NOT IN (SELECT id FROM claimed)
            ) THEN %(now)s
            ELSE (SELECT min("lock") FROM {{queue}} WHERE "key" = %(key)s AND "lock" >= %(now)s)
        END, NULL{from_no_flush}"""
# A claim need not wait for its WAL flush (in autocommit only, as _NO_FLUSH): a server crash
# that loses it leaves its bells due, handed out again, and a tick is safe to repeat (it
# re-reads the instance under its lock). The wait was a fifth of a wake-up's latency.
_BELL_NO_FLUSH = """, no_flush AS (
            SELECT set_config('synchronous_commit', 'off', true)
        )"""

#: The queue priority of a bell that rings for no instance: the least an integer column holds.
HOUSEKEEPING_BELL_PRIORITY = -(2**31)

# django-q2's queue table (the ORM broker's), named at call time: django-q2 may not be
# installed where this module is imported. "key" and "lock" are SQL keywords: quoted.
_QUEUE_STATEMENTS: dict[str, str] = {
    # The due bells, lowest priority value first, then earliest due, up to a limit (SQLite:
    # read first, so an empty queue's poll takes no write lock).
    "due_bells": """
        SELECT id, payload FROM {queue} WHERE "key" = %(key)s AND "lock" < %(now)s
        ORDER BY workerflow_priority, "lock", id LIMIT %(limit)s""",
    # SQLite: claim the bells just read that no other cluster claimed meanwhile.
    "claim_bells": """
        UPDATE {queue} SET "lock" = %(until)s
        WHERE id IN ({ids}) AND "lock" < %(now)s RETURNING id""",
    # PostgreSQL: claim the due bells in one statement (see _CLAIM_DUE_BELLS).
    "claim_due_bells": _CLAIM_DUE_BELLS.format(no_flush="", from_no_flush=""),
    "claim_due_bells_no_flush": _CLAIM_DUE_BELLS.format(
        no_flush=_BELL_NO_FLUSH, from_no_flush=" FROM no_flush"
    ),
    # One bell (bells.queue_task) that rings for an instance: with its priority.
    "insert_instance_bell": f"""
        INSERT INTO {{queue}} ("key", payload, "lock", workerflow_priority)
        VALUES (%(key)s, %(payload)s, %(due)s, COALESCE(
            (SELECT priority FROM {INSTANCE} WHERE id = %(instance)s), 0))
        RETURNING id""",
    # One bell for no instance (a sweep, a schedule, a delivery): housekeeping, ahead of any
    # backlog (the column's least value), so a queue of urgent tasks cannot hold back the
    # sweeper that recovers them.
    "insert_bell": f"""
        INSERT INTO {{queue}} ("key", payload, "lock", workerflow_priority)
        VALUES (%(key)s, %(payload)s, %(due)s, {HOUSEKEEPING_BELL_PRIORITY})
        RETURNING id""",
    # A bell handled (acknowledged) or unreadable (failed).
    "delete_bell": "DELETE FROM {queue} WHERE id = %(id)s",
    # PostgreSQL: finish_followups_notify, acknowledging the bell of the finishing tick in
    # the same statement (workers/handled_bell.py).
    "finish_followups_acknowledging": (
        "WITH acknowledged AS (DELETE FROM {queue} WHERE id = %(bell)s) "
        f"SELECT {_FINISH_FOLLOWUPS}, pg_notify(%(channel)s::text, '')"
    ),
}


def queue_statement(name: str, table: str, ids: int = 0) -> str:
    """The queue statement ``name`` on django-q2's queue ``table`` (``ids``: how many ids
    ``claim_bells`` names, as the parameters ``id_0``, ``id_1``, ...)."""
    marks = ", ".join(f"%(id_{index})s" for index in range(ids))
    return _QUEUE_STATEMENTS[name].format(queue=table, ids=marks)


def purge_statement(table: str, count: int) -> str:
    """Delete the rows of ``table`` that belong to ``count`` instances (their ids as %s).

    ``table`` is the instance table itself (rows by id) or one that points at instances.
    """
    column = "id" if table == INSTANCE else "instance_id"
    marks = ", ".join(["%s"] * count)
    return f"DELETE FROM {table} WHERE {column} IN ({marks})"


@cache
def statement(vendor: str, name: str) -> str:
    """The statement ``name`` for the database ``vendor`` (postgresql, or sqlite).

    Raises :class:`StatementDialectError` if ``name`` is not declared for ``vendor``.
    """
    text = _STATEMENTS[name]
    dialect = _DIALECTS.get(name)
    if dialect is None:
        raise StatementDialectError(
            f"The statement '{name}' declares no dialect. Add it to _DIALECTS in "
            "django_workerflow/store/sql.py: Dialect.POSTGRESQL, Dialect.SQLITE or Dialect.BOTH."
        )
    if dialect not in (Dialect.BOTH, vendor):
        raise StatementDialectError(
            f"The statement '{name}' is declared for {dialect.value} only, and was asked for "
            f"{vendor}. Run the {vendor} statement of the same intent, or declare this one "
            "for both databases in _DIALECTS (django_workerflow/store/sql.py) if it runs there."
        )
    return text if vendor == Dialect.POSTGRESQL else re.sub(r"::\w+", "", text)


def params(**values: Any) -> dict[str, Any]:
    """``values`` with the states every statement may compare with."""
    return {**STATE_PARAMS, **values}


# Sending an event (runtime/events.py's send_event) ---------------------------------------

_SATISFIED_EVENT = _event_from(
    "satisfied", "%(event_wait_satisfied)s::varchar", "NULL", "NULL", "%(payload)s::text"
)


@cache
def send_event_statement(queue_table: str | None) -> str:
    """PostgreSQL: send an event to an instance whose row the transaction has locked, in
    one statement. With ``active``, the earliest waiting wait step of the name whose
    deadline has not come is satisfied (with its step event), and the event is inserted
    claimed by it; else the event is inserted queued. The instance is asked for a tick if
    a step was satisfied or ``admit`` (a queued pending instance asks for admission):
    while ``leased`` only ``wake_requested``, else also its alarm, and with ``bell`` (a
    ``queue_table`` given) its bell row, recorded in ``bell_at``. Answers the event's id,
    the step that claimed it (or NULL) and, when none did, the event names of the waiting
    wait steps, oldest first.

    The lock is taken by an earlier statement: this one's snapshot then sees every step a
    tick committed while the lock was awaited.
    """
    text = f"""
        WITH waiting AS (
            SELECT id FROM {STEP}
            WHERE %(active)s::boolean AND instance_id = %(instance)s::bigint
                AND type = %(type_wait)s::varchar AND state = %(state_waiting)s::varchar
                AND event_name = %(event_name)s::varchar
                AND {_WAIT_OPEN}
            ORDER BY created_at, id LIMIT 1
        ), satisfied AS (
            UPDATE {STEP} SET state = %(state_satisfied)s::varchar,
                payload = %(payload)s::text, resolved_at = %(now)s::timestamptz
            WHERE id = (SELECT id FROM waiting)
            RETURNING id
        ), satisfied_event AS (
            {_SATISFIED_EVENT}
        ), event AS (
            INSERT INTO {INBOUND} (instance_id, event_name, payload, created_at, claimed_by_id,
                claimed_at, trace_context)
            SELECT %(instance)s::bigint, %(event_name)s::varchar, %(event_payload)s::text,
                %(now)s::timestamptz, s.id, CASE WHEN s.id IS NULL THEN NULL
                ELSE %(now)s::timestamptz END, %(trace_context)s::text
            FROM (SELECT (SELECT id FROM satisfied) AS id) AS s
            RETURNING id, claimed_by_id
        ), woken AS (
            UPDATE {INSTANCE} SET wake_requested = true, updated_at = %(now)s::timestamptz,
                alarm_at = CASE WHEN %(leased)s::boolean THEN alarm_at
                    ELSE %(now)s::timestamptz END,
                alarm_cause = CASE WHEN %(leased)s::boolean THEN alarm_cause
                    WHEN EXISTS (SELECT 1 FROM satisfied) THEN %(cause_event)s::varchar
                    ELSE '' END,
                bell_at = CASE WHEN %(bell)s::boolean THEN %(now)s::timestamptz
                    ELSE bell_at END
            WHERE id = %(instance)s::bigint
                AND (%(admit)s::boolean OR EXISTS (SELECT 1 FROM satisfied))
            RETURNING id, priority
        ),"""
    if queue_table is not None:
        text += f""" bell AS (
            INSERT INTO {queue_table} {_QUEUE_COLUMNS}
            SELECT %(list_key)s::varchar, %(bell_payload)s::text, %(now)s::timestamptz, priority
            FROM woken WHERE %(bell)s::boolean
        ),"""
    return (
        text.rstrip(",")
        + f"""
        SELECT event.id, event.claimed_by_id, EXISTS (SELECT 1 FROM woken),
            CASE WHEN event.claimed_by_id IS NULL THEN ARRAY(
                SELECT event_name FROM {STEP}
                WHERE instance_id = %(instance)s::bigint AND type = %(type_wait)s::varchar
                    AND state = %(state_waiting)s::varchar
                ORDER BY created_at, id
            ) END
        FROM event"""
    )


# Starting instances (store/instance_inserts.py composes the parameters) --------------------

_QUOTED_KEY = '"key"'
#: A bell's priority is its instance's (see migration 0020): the broker claims lower first.
_QUEUE_COLUMNS = '("key", "payload", "lock", "workerflow_priority")'
_EVENT_COLUMNS = "(instance_id, type, reason, recorded_at)"


#: PostgreSQL: ids drawn from the instance table's sequence in one statement, for the table
#: (its name) and a count (``OFFSET 0`` keeps the sequence's name from being looked up once
#: per row).
DRAW_INSTANCE_IDS = (
    "SELECT nextval(s.seq) FROM (SELECT pg_get_serial_sequence(%s, 'id')::regclass "
    "AS seq OFFSET 0) AS s, generate_series(1, %s)"
)


@cache
def start_one_statement(columns: tuple[str, ...], queue_table: str) -> str:
    """PostgreSQL: one instance (its id given), its 'created' event and its bell in one
    statement; answers (the new id or NULL, whether the key existed before). The key is
    looked up only when nothing was created: a CASE evaluates its subqueries lazily."""
    marks = ", ".join(["%s"] * (len(columns) + 1))
    return (
        f"WITH new AS (INSERT INTO {INSTANCE} (id, {', '.join(columns)}) VALUES ({marks}) "
        f"ON CONFLICT DO NOTHING RETURNING id, priority), created AS (INSERT INTO "
        f"{WORKFLOW_EVENT} {_EVENT_COLUMNS} SELECT id, %s, NULL, %s FROM new), bells AS "
        f"(INSERT INTO {queue_table} {_QUEUE_COLUMNS} SELECT %s, %s, %s::timestamptz, "
        "priority FROM new) "
        f"SELECT (SELECT id FROM new), CASE WHEN EXISTS (SELECT 1 FROM new) THEN false "
        f"ELSE EXISTS (SELECT 1 FROM {INSTANCE} WHERE {_QUOTED_KEY} = %s) END"
    )


def start_batch_statement(columns: tuple[str, ...], select: str, queue_table: str | None) -> str:
    """PostgreSQL: a batch of instances from ``select`` (:func:`unnest_select`), their
    events and (with a ``queue_table``) their bells in one statement; answers (id, key)."""
    text = (
        f"WITH new AS (INSERT INTO {INSTANCE} ({', '.join(columns)}) {select} "
        f"ON CONFLICT ({_QUOTED_KEY}) DO NOTHING RETURNING id, {_QUOTED_KEY}, priority), "
        f"created AS (INSERT INTO {WORKFLOW_EVENT} {_EVENT_COLUMNS} SELECT id, %s, NULL, %s "
        "FROM new)"
    )
    if queue_table is not None:
        text += (
            f", bells AS (INSERT INTO {queue_table} {_QUEUE_COLUMNS} "
            "SELECT %s, b.payload, %s::timestamptz, new.priority FROM new JOIN "
            "unnest(%s::bigint[], %s::text[]) AS b(instance_id, payload) "
            "ON b.instance_id = new.id)"
        )
    return text + f" SELECT id, {_QUOTED_KEY} FROM new"


def unnest_select(outputs: list[str], arrays: list[tuple[str, str]]) -> str:
    """PostgreSQL: the SELECT of a batch's rows: ``outputs`` (a column's one value as
    ``%s::type``, or ``v.cN``), from ``unnest`` of the ``arrays`` ((cN, type) each)."""
    select = f"SELECT {', '.join(outputs)}"
    if arrays:  # else one row
        unnest = ", ".join(f"%s::{db_type}[]" for _name, db_type in arrays)
        names = ", ".join(name for name, _db_type in arrays)
        select += f" FROM unnest({unnest}) AS v({names})"
    return select


def insert_instances_statement(columns: tuple[str, ...], count: int) -> str:
    """SQLite: ``count`` instances; answers (id, key) of those created."""
    marks = "(" + ", ".join(["%s"] * len(columns)) + ")"
    return (
        f"INSERT INTO {INSTANCE} ({', '.join(columns)}) VALUES "
        + ", ".join([marks] * count)
        + f" ON CONFLICT ({_QUOTED_KEY}) DO NOTHING RETURNING id, {_QUOTED_KEY}"
    )


def insert_created_events_statement(count: int) -> str:
    """SQLite: the 'created' events of ``count`` new instances."""
    return f"INSERT INTO {WORKFLOW_EVENT} {_EVENT_COLUMNS} VALUES " + ", ".join(
        ["(%s, %s, NULL, %s)"] * count
    )


def insert_bells_statement(queue_table: str, count: int) -> str:
    """SQLite: the bells of ``count`` new instances, as django-q2 queue rows."""
    return f"INSERT INTO {queue_table} {_QUEUE_COLUMNS} VALUES " + ", ".join(
        ["(%s, %s, %s, %s)"] * count
    )


# The console and waiting callers ----------------------------------------------------------


def distinct_values_statement(table: str, column: str) -> str:
    """The distinct non-null values of ``column`` (both quoted), in order, one index probe
    each (a recursive skip scan instead of ``SELECT DISTINCT``)."""
    return f"""
        WITH RECURSIVE skip(value) AS (
            SELECT (SELECT {column} FROM {table} ORDER BY {column} LIMIT 1)
            UNION ALL
            SELECT (SELECT {column} FROM {table} WHERE {column} > skip.value
                    ORDER BY {column} LIMIT 1)
            FROM skip WHERE skip.value IS NOT NULL
        )
        SELECT value FROM skip WHERE value IS NOT NULL"""


def sampled_counts_statement(table: str, percent: float) -> str:
    """PostgreSQL: the rows of ``table`` (quoted) per definition and status in a random
    ``percent`` of its pages (``TABLESAMPLE SYSTEM``), and how many rows were read."""
    return f"""
        SELECT definition_name, status, count(*), sum(count(*)) OVER ()
        FROM {table} TABLESAMPLE SYSTEM ({float(percent)!r})
        GROUP BY definition_name, status"""


def explain_statement(query: str) -> str:
    """PostgreSQL: the planner's plan of ``query`` as JSON (its row estimate)."""
    return f"EXPLAIN (FORMAT JSON) {query}"


def listen_statement(channel: str) -> str:
    """PostgreSQL: hear the notifications of ``channel`` (a name this engine made)."""
    return f'LISTEN "{channel}"'


def unlisten_statement(channel: str) -> str:
    return f'UNLISTEN "{channel}"'
