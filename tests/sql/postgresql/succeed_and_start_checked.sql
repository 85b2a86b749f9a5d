WITH done AS (
            UPDATE workerflow_step
            SET state = %(state_succeeded)s::varchar, result = %(result)s::text,
                resolved_at = %(now)s::timestamptz
            WHERE id = %(step)s::bigint AND state = %(state_running)s::varchar
                AND attempt_count = %(attempt)s::integer
            RETURNING id, derived_attempt_events
        ), succeeded AS (
            INSERT INTO workerflow_stepevent (instance_id, step_id, type, recorded_at, attempt_number, result, error_name, error_message, next_attempt_at, wake_at, event_name, timeout_at, payload) SELECT %(instance)s::bigint, id, %(event_attempt_succeeded)s::varchar, %(now)s::timestamptz, %(attempt)s::integer, %(result)s::text, '', '', NULL, NULL, '', NULL, NULL FROM done WHERE NOT derived_attempt_events
        ),
        fence AS (
            SELECT id FROM workerflow_workflowinstance
            WHERE id = %(instance)s::bigint AND lease_token = %(token)s::varchar AND status = %(status_running)s::varchar AND NOT EXISTS (SELECT 1 FROM workerflow_definitionpause WHERE workerflow_definitionpause.definition_name = workerflow_workflowinstance.definition_name) AND EXISTS (SELECT 1 FROM done) FOR SHARE
        ),
        new_step AS (
            INSERT INTO workerflow_step (instance_id, step_id, type, state, parent_id, attempt_count, max_attempts, error_name, error_message, wake_at, event_name, timeout_at, created_at, derived_attempt_events)
            SELECT id, %(step_id)s::varchar, %(type_run)s::varchar, %(state_running)s::varchar,
                %(parent)s::bigint, 1, %(max_attempts)s::integer, '', '', NULL, '',
                NULL, %(now)s::timestamptz, true
            FROM fence
            RETURNING id
        )
        SELECT (SELECT count(*) FROM done), (SELECT id FROM new_step)
