SELECT lease_token FROM workerflow_workflowinstance WHERE id = %(instance)s
