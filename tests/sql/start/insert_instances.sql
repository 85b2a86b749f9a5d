INSERT INTO workerflow_workflowinstance (key, input) VALUES (%s, %s), (%s, %s) ON CONFLICT ("key") DO NOTHING RETURNING id, "key"
