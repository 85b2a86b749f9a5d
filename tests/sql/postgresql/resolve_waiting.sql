UPDATE workerflow_step SET state = %(state)s, resolved_at = %(now)s
        WHERE id = %(step)s AND state = %(state_waiting)s
