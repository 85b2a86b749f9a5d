UPDATE django_q_ormq SET "lock" = %(until)s
        WHERE id IN (%(id_0)s) AND "lock" < %(now)s RETURNING id
