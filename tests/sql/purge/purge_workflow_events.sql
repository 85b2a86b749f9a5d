DELETE FROM workerflow_workflowevent WHERE instance_id IN (%s, %s)
