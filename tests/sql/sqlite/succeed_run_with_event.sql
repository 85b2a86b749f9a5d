WITH done AS (
            UPDATE workerflow_step
            SET state = %(state_succeeded)s, result = %(result)s,
                resolved_at = %(now)s
            WHERE id = %(step)s AND state = %(state_running)s
                AND attempt_count = %(attempt)s
            RETURNING id, derived_attempt_events
        ), succeeded AS (
            INSERT INTO workerflow_stepevent (instance_id, step_id, type, recorded_at, attempt_number, result, error_name, error_message, next_attempt_at, wake_at, event_name, timeout_at, payload) SELECT %(instance)s, id, %(event_attempt_succeeded)s, %(now)s, %(attempt)s, %(result)s, '', '', NULL, NULL, '', NULL, NULL FROM done WHERE NOT derived_attempt_events
        ) SELECT count(*) FROM done
