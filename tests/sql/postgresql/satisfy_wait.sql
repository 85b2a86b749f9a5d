UPDATE workerflow_step SET state = %(state_satisfied)s, payload = %(payload)s,
            resolved_at = %(now)s
        WHERE id = %(step)s
