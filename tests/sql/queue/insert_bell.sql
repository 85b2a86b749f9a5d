INSERT INTO django_q_ormq ("key", payload, "lock", workerflow_priority)
        VALUES (%(key)s, %(payload)s, %(due)s, -2147483648)
        RETURNING id
