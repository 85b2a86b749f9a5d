WITH acknowledged AS (DELETE FROM django_q_ormq WHERE id = %(bell)s) SELECT 
        EXISTS (
            SELECT 1 FROM workerflow_workflowinstance WHERE parent_id = %(instance)s::bigint AND NOT detached
            AND status NOT IN (
                %(status_completed)s::varchar, %(status_failed)s::varchar,
                %(status_cancelled)s::varchar)
        ),
        EXISTS (
            SELECT 1 FROM workerflow_step WHERE child_instance_id = %(instance)s::bigint
            AND type = %(type_child)s::varchar AND state = %(state_waiting)s::varchar
        ), pg_notify(%(channel)s::text, '')
