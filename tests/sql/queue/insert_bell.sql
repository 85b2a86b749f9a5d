INSERT INTO django_q_ormq ("key", payload, "lock") VALUES (%(key)s, %(payload)s, %(due)s)
        RETURNING id
