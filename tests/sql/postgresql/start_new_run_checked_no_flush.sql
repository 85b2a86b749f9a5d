WITH fence AS (
            SELECT id FROM workerflow_workflowinstance WHERE id = %(instance)s::bigint AND lease_token = %(token)s::varchar AND status = %(status_running)s::varchar FOR SHARE
        ),
        new_step AS (
            INSERT INTO workerflow_step (instance_id, step_id, type, state, parent_id, attempt_count, max_attempts, error_name, error_message, wake_at, event_name, timeout_at, created_at)
            SELECT id, %(step_id)s::varchar, %(type_run)s::varchar, %(state_running)s::varchar,
                %(parent)s::bigint, 1, %(max_attempts)s::integer, '', '', NULL, '',
                NULL, %(now)s::timestamptz
            FROM fence
            RETURNING id
        ), started AS (
            INSERT INTO workerflow_stepevent (instance_id, step_id, type, recorded_at, attempt_number, result, error_name, error_message, next_attempt_at, wake_at, event_name, timeout_at, payload) SELECT %(instance)s::bigint, id, %(event_attempt_started)s::varchar, %(now)s::timestamptz, 1, NULL, '', '', NULL, NULL, '', NULL, NULL FROM new_step
        ), no_flush AS (
            SELECT set_config('synchronous_commit', 'off', true)
        )
        SELECT id FROM new_step, no_flush
