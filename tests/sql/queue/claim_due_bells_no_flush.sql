WITH claimed AS (
            UPDATE django_q_ormq AS q SET "lock" = %(until)s
            FROM (
                SELECT id, "lock" AS due, workerflow_priority AS priority FROM django_q_ormq
                WHERE "key" = %(key)s AND "lock" < %(now)s
                ORDER BY workerflow_priority, "lock", id LIMIT %(limit)s FOR UPDATE SKIP LOCKED
            ) AS d
            WHERE q.id = d.id RETURNING q.id, q.payload, d.due, d.priority
        ), no_flush AS (
            SELECT set_config('synchronous_commit', 'off', true)
        )
        SELECT id, payload, due, priority FROM claimed
        UNION ALL
        SELECT NULL, NULL, CASE
            WHEN EXISTS (SELECT FROM claimed) AND EXISTS (
                SELECT FROM django_q_ormq WHERE "key" = %(key)s AND "lock" < %(now)s
                AND id NOT IN (SELECT id FROM claimed)
            ) THEN %(now)s
            ELSE (SELECT min("lock") FROM django_q_ormq WHERE "key" = %(key)s AND "lock" >= %(now)s)
        END, NULL FROM no_flush
