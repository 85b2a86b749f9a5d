INSERT INTO workerflow_stepevent (instance_id, step_id, type, recorded_at, attempt_number, result, error_name, error_message, next_attempt_at, wake_at, event_name, timeout_at, payload, traceback)
        VALUES (%(instance)s, %(step)s, %(type)s, %(now)s,
            %(attempt_number)s, %(result)s, %(error_name)s, %(error_message)s,
            %(next_attempt_at)s, %(wake_at)s, %(event_name)s, %(timeout_at)s, %(payload)s,
            %(traceback)s)
