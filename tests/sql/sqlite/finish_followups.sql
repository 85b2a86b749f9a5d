SELECT 
        EXISTS (
            SELECT 1 FROM workerflow_workflowinstance WHERE parent_id = %(instance)s AND NOT detached
            AND status NOT IN (
                %(status_completed)s, %(status_failed)s,
                %(status_cancelled)s)
        ),
        EXISTS (
            SELECT 1 FROM workerflow_step WHERE child_instance_id = %(instance)s
            AND type = %(type_child)s AND state = %(state_waiting)s
        )
