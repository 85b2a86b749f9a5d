DELETE FROM django_q_ormq WHERE id = %(id)s
