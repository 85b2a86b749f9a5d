UPDATE workerflow_workflowinstance SET status = %s, alarm_at = %s, updated_at = %s WHERE id = %s AND status = %s
