WITH done AS (
            UPDATE workerflow_step
            SET state = %(state_succeeded)s::varchar, result = %(result)s::text,
                resolved_at = %(now)s::timestamptz
            WHERE id = %(step)s::bigint AND state = %(state_running)s::varchar
                AND attempt_count = %(attempt)s::integer
            RETURNING id, derived_attempt_events
        ), succeeded AS (
            INSERT INTO workerflow_stepevent (instance_id, step_id, type, recorded_at, attempt_number, result, error_name, error_message, next_attempt_at, wake_at, event_name, timeout_at, payload) SELECT %(instance)s::bigint, id, %(event_attempt_succeeded)s::varchar, %(now)s::timestamptz, %(attempt)s::integer, %(result)s::text, '', '', NULL, NULL, '', NULL, NULL FROM done WHERE NOT derived_attempt_events
        ) SELECT count(*) FROM done
