UPDATE workerflow_workflowinstance SET alarm_at = %s, updated_at = %s WHERE id = %s
