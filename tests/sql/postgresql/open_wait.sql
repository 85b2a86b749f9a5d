SELECT id FROM workerflow_step
        WHERE instance_id = %(instance)s::bigint AND type = %(type_wait)s::varchar
            AND state = %(state_waiting)s::varchar AND event_name = %(event_name)s::varchar
            AND (timeout_at IS NULL OR timeout_at > %(now)s::timestamptz)
        ORDER BY created_at, id LIMIT 1
