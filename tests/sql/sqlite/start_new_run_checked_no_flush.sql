WITH fence AS (
            SELECT id FROM workerflow_workflowinstance WHERE id = %(instance)s AND lease_token = %(token)s AND status = %(status_running)s AND NOT EXISTS (SELECT 1 FROM workerflow_definitionpause WHERE workerflow_definitionpause.definition_name = workerflow_workflowinstance.definition_name) FOR SHARE
        ),
        new_step AS (
            INSERT INTO workerflow_step (instance_id, step_id, type, state, parent_id, attempt_count, max_attempts, error_name, error_message, wake_at, event_name, timeout_at, created_at, derived_attempt_events)
            SELECT id, %(step_id)s, %(type_run)s, %(state_running)s,
                %(parent)s, 1, %(max_attempts)s, '', '', NULL, '',
                NULL, %(now)s, true
            FROM fence
            RETURNING id
        ), no_flush AS (
            SELECT set_config('synchronous_commit', 'off', true)
        )
        SELECT id FROM new_step, no_flush
