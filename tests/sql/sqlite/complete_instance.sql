WITH completed AS (
            UPDATE workerflow_workflowinstance SET status = %(status_completed)s,
                result = %(instance_result)s, alarm_at = NULL, alarm_cause = '',
                lease_token = NULL, lease_expires_at = NULL, wake_requested = false,
                updated_at = %(now)s, finished_at = %(now)s
            WHERE id = %(instance)s AND lease_token = %(token)s AND status = %(status_running)s AND NOT EXISTS (SELECT 1 FROM workerflow_definitionpause WHERE workerflow_definitionpause.definition_name = workerflow_workflowinstance.definition_name) AND unreached_step_ids IS NULL
            RETURNING id, key, definition_name, definition_version, input, status, result, error_name, error_message, alarm_at, alarm_cause, lease_token, lease_expires_at, unreached_step_ids, bell_at, wake_requested, created_at, updated_at, finished_at, priority, concurrency_key, admitted_at, error_traceback, error_step_id, other_error_step_ids, forked_from_id, parent_id, detached, progress_current, progress_total, progress_message, progress_at, trace_context, timeout_seconds, deadline_at, timeout_left_seconds, attributes
        ), completed_event AS (
            INSERT INTO workerflow_workflowevent (instance_id, type, reason, recorded_at)
            SELECT id, %(event_completed)s, NULL, %(now)s FROM completed
        )
        SELECT id, key, definition_name, definition_version, input, status, result, error_name, error_message, alarm_at, alarm_cause, lease_token, lease_expires_at, unreached_step_ids, bell_at, wake_requested, created_at, updated_at, finished_at, priority, concurrency_key, admitted_at, error_traceback, error_step_id, other_error_step_ids, forked_from_id, parent_id, detached, progress_current, progress_total, progress_message, progress_at, trace_context, timeout_seconds, deadline_at, timeout_left_seconds, attributes FROM completed
