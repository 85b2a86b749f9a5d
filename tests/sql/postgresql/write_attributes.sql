UPDATE workerflow_workflowinstance SET attributes = %(attributes)s::jsonb WHERE id = %(instance)s::bigint AND lease_token = %(token)s::varchar
