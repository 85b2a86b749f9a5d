UPDATE workerflow_inboundevent SET claimed_by_id = %(step)s, claimed_at = %(now)s
        WHERE id = %(event)s
