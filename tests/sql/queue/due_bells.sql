SELECT id, payload FROM django_q_ormq WHERE "key" = %(key)s AND "lock" < %(now)s
        ORDER BY workerflow_priority, "lock", id LIMIT %(limit)s
