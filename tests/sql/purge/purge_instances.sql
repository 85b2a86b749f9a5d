DELETE FROM workerflow_workflowinstance WHERE id IN (%s, %s)
