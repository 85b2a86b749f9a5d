INSERT INTO workerflow_workflowevent (instance_id, type, reason, recorded_at) VALUES (%s, %s, NULL, %s), (%s, %s, NULL, %s)
