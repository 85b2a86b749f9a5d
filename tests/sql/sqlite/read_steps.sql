SELECT id, step_id, type, state, parent_id, attempt_count, max_attempts, next_attempt_at, result, error_name, error_message, wake_at, event_name, timeout_at, payload, resolved_at, created_at, child_instance_id FROM workerflow_step
        WHERE instance_id = %(instance)s ORDER BY created_at, id
