WITH done AS (
            UPDATE workerflow_step
            SET state = %(state_succeeded)s, result = %(result)s,
                resolved_at = %(now)s
            WHERE id = %(step)s AND state = %(state_running)s
                AND attempt_count = %(attempt)s
            RETURNING id, derived_attempt_events
        ), succeeded AS (
            INSERT INTO workerflow_stepevent (instance_id, step_id, type, recorded_at, attempt_number, result, error_name, error_message, next_attempt_at, wake_at, event_name, timeout_at, payload) SELECT %(instance)s, id, %(event_attempt_succeeded)s, %(now)s, %(attempt)s, %(result)s, '', '', NULL, NULL, '', NULL, NULL FROM done WHERE NOT derived_attempt_events
        ),
        fence AS (
            UPDATE workerflow_workflowinstance SET lease_expires_at = %(expires)s, alarm_at = CASE WHEN status = %(status_running)s THEN %(expires)s ELSE alarm_at END
            WHERE id = %(instance)s AND lease_token = %(token)s AND status = %(status_running)s AND NOT EXISTS (SELECT 1 FROM workerflow_definitionpause WHERE workerflow_definitionpause.definition_name = workerflow_workflowinstance.definition_name) AND EXISTS (SELECT 1 FROM done)
            RETURNING id
        ),
        new_step AS (
            INSERT INTO workerflow_step (instance_id, step_id, type, state, parent_id, attempt_count, max_attempts, error_name, error_message, wake_at, event_name, timeout_at, created_at, derived_attempt_events)
            SELECT id, %(step_id)s, %(type_run)s, %(state_running)s,
                %(parent)s, 1, %(max_attempts)s, '', '', NULL, '',
                NULL, %(now)s, true
            FROM fence
            RETURNING id
        )
        SELECT (SELECT count(*) FROM done), (SELECT id FROM new_step)
