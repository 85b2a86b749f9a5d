INSERT INTO django_q_ormq ("key", "payload", "lock", "workerflow_priority") VALUES (%s, %s, %s, %s), (%s, %s, %s, %s)
