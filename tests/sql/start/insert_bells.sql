INSERT INTO django_q_ormq ("key", "payload", "lock") VALUES (%s, %s, %s), (%s, %s, %s)
