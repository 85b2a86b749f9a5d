WITH found AS (
            SELECT id, key, definition_name, definition_version, input, status, result, error_name, error_message, alarm_at, alarm_cause, lease_token, lease_expires_at, unreached_step_ids, bell_at, wake_requested, created_at, updated_at, finished_at, priority, concurrency_key, admitted_at, error_traceback, error_step_id, other_error_step_ids, forked_from_id, parent_id, detached, progress_current, progress_total, progress_message, progress_at, trace_context, timeout_seconds, deadline_at, timeout_left_seconds, attributes,
                EXISTS (SELECT 1 FROM workerflow_step WHERE workerflow_step.instance_id = workerflow_workflowinstance.id)
                    AS has_steps,
                EXISTS (SELECT 1 FROM workerflow_definitionpause WHERE workerflow_definitionpause.definition_name = workerflow_workflowinstance.definition_name) AS definition_paused
            FROM workerflow_workflowinstance WHERE id = %(instance)s::bigint FOR UPDATE
        ), claimed AS (
            UPDATE workerflow_workflowinstance AS i SET status = %(status_running)s::varchar,
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
            INSERT INTO workerflow_workflowevent (instance_id, type, reason, recorded_at)
            SELECT claimed.id, %(event_started)s::varchar, NULL, %(now)s::timestamptz
            FROM claimed, found WHERE found.status = %(status_pending)s::varchar
        )
        SELECT found.id, found.key, found.definition_name, found.definition_version, found.input, found.status, found.result, found.error_name, found.error_message, found.alarm_at, found.alarm_cause, found.lease_token, found.lease_expires_at, found.unreached_step_ids, found.bell_at, found.wake_requested, found.created_at, found.updated_at, found.finished_at, found.priority, found.concurrency_key, found.admitted_at, found.error_traceback, found.error_step_id, found.other_error_step_ids, found.forked_from_id, found.parent_id, found.detached, found.progress_current, found.progress_total, found.progress_message, found.progress_at, found.trace_context, found.timeout_seconds, found.deadline_at, found.timeout_left_seconds, found.attributes, found.has_steps,
            found.definition_paused, EXISTS (SELECT 1 FROM claimed)
        FROM found
