UPDATE workerflow_step SET state = %(state_running)s, attempt_count = %(attempt)s
        WHERE id = %(step)s AND state = %(state_pending)s AND attempt_count = %(previous)s
            AND (next_attempt_at IS NULL OR next_attempt_at <= %(now)s)
