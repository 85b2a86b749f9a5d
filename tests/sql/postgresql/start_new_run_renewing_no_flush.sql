WITH fence AS (
            UPDATE workerflow_workflowinstance SET lease_expires_at = %(expires)s::timestamptz, alarm_at = CASE WHEN status = %(status_running)s::varchar THEN %(expires)s::timestamptz ELSE alarm_at END
            WHERE id = %(instance)s::bigint AND lease_token = %(token)s::varchar AND status = %(status_running)s::varchar AND NOT EXISTS (SELECT 1 FROM workerflow_definitionpause WHERE workerflow_definitionpause.definition_name = workerflow_workflowinstance.definition_name)
            RETURNING id
        ),
        new_step AS (
            INSERT INTO workerflow_step (instance_id, step_id, type, state, parent_id, attempt_count, max_attempts, error_name, error_message, wake_at, event_name, timeout_at, created_at, derived_attempt_events)
            SELECT id, %(step_id)s::varchar, %(type_run)s::varchar, %(state_running)s::varchar,
                %(parent)s::bigint, 1, %(max_attempts)s::integer, '', '', NULL, '',
                NULL, %(now)s::timestamptz, true
            FROM fence
            RETURNING id
        ), no_flush AS (
            SELECT set_config('synchronous_commit', 'off', true)
        )
        SELECT id FROM new_step, no_flush
