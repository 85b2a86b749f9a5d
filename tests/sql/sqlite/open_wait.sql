SELECT id FROM workerflow_step
        WHERE instance_id = %(instance)s AND type = %(type_wait)s
            AND state = %(state_waiting)s AND event_name = %(event_name)s
            AND (timeout_at IS NULL OR timeout_at > %(now)s)
        ORDER BY created_at, id LIMIT 1
