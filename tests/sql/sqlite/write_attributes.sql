UPDATE workerflow_workflowinstance SET attributes = %(attributes)s WHERE id = %(instance)s AND lease_token = %(token)s
