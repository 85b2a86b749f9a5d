INSERT INTO workerflow_stepevent (instance_id, step_id, type, recorded_at, attempt_number, result, error_name, error_message, next_attempt_at, wake_at, event_name, timeout_at, payload) VALUES
            (%(instance)s, %(step)s, %(event_attempt_succeeded)s, %(now)s, %(attempt)s,
                %(result)s, '', '', NULL, NULL, '', NULL, NULL),
            (%(instance)s, %(new_step)s, %(event_attempt_started)s, %(now)s, 1, NULL, '', '',
                NULL, NULL, '', NULL, NULL)
