INSERT INTO workerflow_step (instance_id, step_id, type, state, parent_id, attempt_count, max_attempts, error_name, error_message, wake_at, event_name, timeout_at, created_at)
        VALUES (%(instance)s, %(step_id)s, %(type)s, %(state_waiting)s, %(parent)s, 0, NULL,
            '', '', %(wake_at)s, %(event_name)s, %(timeout_at)s, %(now)s)
        RETURNING id
