INSERT INTO workerflow_workflowevent (instance_id, type, reason, recorded_at) VALUES (%s, %s, %s, %s)
