UPDATE workerflow_step SET state = %(state)s, error_name = %(error_name)s,
            error_message = %(error_message)s, next_attempt_at = %(next_attempt_at)s,
            resolved_at = %(resolved_at)s
        WHERE id = %(step)s AND state = %(state_running)s AND attempt_count = %(attempt)s
