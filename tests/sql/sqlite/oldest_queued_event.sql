SELECT id, payload FROM workerflow_inboundevent
        WHERE instance_id = %(instance)s AND event_name = %(event_name)s
            AND claimed_at IS NULL
            AND (%(deadline)s IS NULL OR created_at < %(deadline)s)
        ORDER BY created_at, id LIMIT 1
