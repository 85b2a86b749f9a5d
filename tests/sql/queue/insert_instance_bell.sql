INSERT INTO django_q_ormq ("key", payload, "lock", workerflow_priority)
        VALUES (%(key)s, %(payload)s, %(due)s, COALESCE(
            (SELECT priority FROM workerflow_workflowinstance WHERE id = %(instance)s), 0))
        RETURNING id
