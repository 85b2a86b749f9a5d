WITH written AS (
            UPDATE workerflow_workflowinstance SET progress_current = %(progress_current)s, progress_total = %(progress_total)s, progress_message = %(progress_message)s, progress_at = %(progress_at)s WHERE id = %(instance)s AND lease_token = %(token)s RETURNING id
        ) SELECT pg_notify(%(channel)s, '') FROM written
