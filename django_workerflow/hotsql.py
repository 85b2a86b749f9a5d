"""The statements of the hot path, written for each database.

Starting a run step and recording its success happen once per step, so each is one
round trip where the database allows it. PostgreSQL gets data-modifying CTEs: one statement
checks and renews the lease (locking the instance row against a concurrent pause or cancel),
writes the step and appends its event, atomically and without BEGIN/COMMIT round trips.
SQLite has no data-modifying CTEs; there the lease check is a subquery of the step write, the
event a second statement, both in one IMMEDIATE transaction.

Recording an outcome needs no lease check: the step row's own condition (still 'running', same
attempt) is the fence. A worker that took the instance over records the interrupted attempt
through the same condition, so exactly one of the two outcomes lands.
"""

from __future__ import annotations

import re
from functools import cache

from .models import InboundEvent, Step, StepEvent, WorkflowInstance

INSTANCE = WorkflowInstance._meta.db_table
STEP = Step._meta.db_table
STEP_EVENT = StepEvent._meta.db_table
INBOUND = InboundEvent._meta.db_table

# Creating a run step with its first attempt started, after the fence CTE has checked the
# lease and the status. The start marker need not wait for its WAL flush: the outcome's
# synchronous commit hardens it, and only a server crash in between can lose it.
_START_NEW_RUN = f"""
        new_step AS (
            INSERT INTO {STEP} (instance_id, step_id, type, state, parent_id, attempt_count,
                max_attempts, error_name, error_message, event_name, created_at)
            SELECT id, %(step_id)s::varchar, 'run', 'running', %(parent)s::bigint, 1,
                %(max_attempts)s::integer, '', '', '', %(now)s::timestamptz
            FROM fence
            RETURNING id
        ), started AS (
            INSERT INTO {STEP_EVENT} (instance_id, step_id, type, recorded_at, attempt_number,
                error_name, error_message, event_name)
            SELECT %(instance)s::bigint, id, 'attempt_started', %(now)s::timestamptz, 1,
                '', '', ''
            FROM new_step
        ), no_flush AS (
            SELECT set_config('synchronous_commit', 'off', true)
        )
        SELECT id FROM new_step, no_flush"""

_POSTGRESQL = {
    # Renews the lease while it checks it (every quarter lease).
    "start_new_run": f"""
        WITH fence AS (
            UPDATE {INSTANCE}
            SET lease_expires_at = %(expires)s::timestamptz,
                alarm_at = %(expires)s::timestamptz
            WHERE id = %(instance)s::bigint
                AND lease_token = %(token)s::varchar
                AND status = %(running)s::varchar
            RETURNING id
        ),{_START_NEW_RUN}""",
    # Only checks it: the share lock still waits for a pause or cancel holding the row, but
    # writes no new version of the instance row and none of its index entries.
    "start_new_run_checked": f"""
        WITH fence AS (
            SELECT id FROM {INSTANCE}
            WHERE id = %(instance)s::bigint
                AND lease_token = %(token)s::varchar
                AND status = %(running)s::varchar
            FOR SHARE
        ),{_START_NEW_RUN}""",
    "succeed_run": f"""
        WITH done AS (
            UPDATE {STEP}
            SET state = 'succeeded', result = %(result)s::text,
                resolved_at = %(now)s::timestamptz
            WHERE id = %(step)s::bigint AND state = 'running'
                AND attempt_count = %(attempt)s::integer
            RETURNING id
        ), succeeded AS (
            INSERT INTO {STEP_EVENT} (instance_id, step_id, type, recorded_at, attempt_number,
                result, error_name, error_message, event_name)
            SELECT %(instance)s::bigint, id, 'attempt_succeeded', %(now)s::timestamptz,
                %(attempt)s::integer, %(result)s::text, '', '', ''
            FROM done
        )
        SELECT count(*) FROM done""",
}

_SQLITE = {
    "start_new_run": f"""
        INSERT INTO {STEP} (instance_id, step_id, type, state, parent_id, attempt_count,
            max_attempts, error_name, error_message, event_name, created_at)
        SELECT %(instance)s, %(step_id)s, 'run', 'running', %(parent)s, 1, %(max_attempts)s,
            '', '', '', %(now)s
        WHERE EXISTS (
            SELECT 1 FROM {INSTANCE}
            WHERE id = %(instance)s AND lease_token = %(token)s AND status = %(running)s
        )
        RETURNING id""",
    "succeed_run": f"""
        UPDATE {STEP} SET state = 'succeeded', result = %(result)s, resolved_at = %(now)s
        WHERE id = %(step)s AND state = 'running' AND attempt_count = %(attempt)s""",
    "renew_lease": f"""
        UPDATE {INSTANCE} SET lease_expires_at = %(expires)s,
            alarm_at = CASE WHEN status = 'running' THEN %(expires)s ELSE alarm_at END
        WHERE id = %(instance)s AND lease_token = %(token)s""",
}


@cache
def hot_sql(vendor: str, name: str) -> str:
    """The statement ``name`` for the database ``vendor`` (postgresql, or sqlite)."""
    return (_POSTGRESQL if vendor == "postgresql" else _SQLITE)[name]


@cache
def prepared(name: str) -> tuple[str, str, tuple[str, ...]]:
    """PostgreSQL: (statement name, PREPARE text, parameter names in $n order).

    Parameters carry explicit casts, so the server knows every type when preparing.
    """
    names: list[str] = []

    def positional(match: re.Match) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    body = re.sub(r"%\((\w+)\)s", positional, _POSTGRESQL[name])
    statement = f"workerflow_{name}"
    return statement, f"PREPARE {statement} AS {body}", tuple(names)
