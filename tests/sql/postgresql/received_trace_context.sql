SELECT trace_context FROM workerflow_inboundevent
        WHERE claimed_by_id = %(step)s::bigint AND trace_context IS NOT NULL
