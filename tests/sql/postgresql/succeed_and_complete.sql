WITH completed AS (
            UPDATE workerflow_workflowinstance SET status = %(status_completed)s::varchar,
                result = %(instance_result)s::text, alarm_at = NULL, alarm_cause = '',
                lease_token = NULL, lease_expires_at = NULL, wake_requested = false,
                updated_at = %(now)s::timestamptz, finished_at = %(now)s::timestamptz
            WHERE id = %(instance)s::bigint AND lease_token = %(token)s::varchar AND status = %(status_running)s::varchar AND NOT EXISTS (SELECT 1 FROM workerflow_definitionpause WHERE workerflow_definitionpause.definition_name = workerflow_workflowinstance.definition_name) AND unreached_step_ids IS NULL
                AND EXISTS (
                    SELECT 1 FROM workerflow_step WHERE id = %(step)s::bigint
                    AND state = %(state_running)s::varchar AND attempt_count = %(attempt)s::integer
                )
            RETURNING id, key, definition_name, definition_version, input, status, result, error_name, error_message, alarm_at, alarm_cause, lease_token, lease_expires_at, unreached_step_ids, bell_at, wake_requested, created_at, updated_at, finished_at, priority, concurrency_key, admitted_at, error_traceback, error_step_id, other_error_step_ids, forked_from_id, parent_id, detached, progress_current, progress_total, progress_message, progress_at, trace_context, timeout_seconds, deadline_at, timeout_left_seconds, attributes
        ), completed_event AS (
            INSERT INTO workerflow_workflowevent (instance_id, type, reason, recorded_at)
            SELECT id, %(event_completed)s::varchar, NULL, %(now)s::timestamptz FROM completed
        ), done AS (
            UPDATE workerflow_step
            SET state = %(state_succeeded)s::varchar, result = %(result)s::text,
                resolved_at = %(now)s::timestamptz
            WHERE id = %(step)s::bigint AND state = %(state_running)s::varchar
                AND attempt_count = %(attempt)s::integer AND EXISTS (SELECT 1 FROM completed)
            RETURNING id, derived_attempt_events
        ), succeeded AS (
            INSERT INTO workerflow_stepevent (instance_id, step_id, type, recorded_at, attempt_number, result, error_name, error_message, next_attempt_at, wake_at, event_name, timeout_at, payload) SELECT %(instance)s::bigint, id, %(event_attempt_succeeded)s::varchar, %(now)s::timestamptz, %(attempt)s::integer, %(result)s::text, '', '', NULL, NULL, '', NULL, NULL FROM done WHERE NOT derived_attempt_events
        )
        SELECT id, key, definition_name, definition_version, input, status, result, error_name, error_message, alarm_at, alarm_cause, lease_token, lease_expires_at, unreached_step_ids, bell_at, wake_requested, created_at, updated_at, finished_at, priority, concurrency_key, admitted_at, error_traceback, error_step_id, other_error_step_ids, forked_from_id, parent_id, detached, progress_current, progress_total, progress_message, progress_at, trace_context, timeout_seconds, deadline_at, timeout_left_seconds, attributes, (SELECT count(*) FROM done) FROM completed
