WITH written AS (
            UPDATE workerflow_workflowinstance SET progress_current = %(progress_current)s::float8, progress_total = %(progress_total)s::float8, progress_message = %(progress_message)s::text, progress_at = %(progress_at)s::timestamptz WHERE id = %(instance)s::bigint AND lease_token = %(token)s::varchar RETURNING id
        ) SELECT pg_notify(%(channel)s::text, '') FROM written
