UPDATE workerflow_step SET state = %(state_succeeded)s, result = %(result)s,
            resolved_at = %(now)s
        WHERE id = %(step)s AND state = %(state_running)s AND attempt_count = %(attempt)s
        RETURNING derived_attempt_events
