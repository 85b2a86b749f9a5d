WITH waiting AS (
            SELECT id FROM workerflow_step
            WHERE %(active)s::boolean AND instance_id = %(instance)s::bigint
                AND type = %(type_wait)s::varchar AND state = %(state_waiting)s::varchar
                AND event_name = %(event_name)s::varchar
                AND (timeout_at IS NULL OR timeout_at > %(now)s::timestamptz)
            ORDER BY created_at, id LIMIT 1
        ), satisfied AS (
            UPDATE workerflow_step SET state = %(state_satisfied)s::varchar,
                payload = %(payload)s::text, resolved_at = %(now)s::timestamptz
            WHERE id = (SELECT id FROM waiting)
            RETURNING id
        ), satisfied_event AS (
            INSERT INTO workerflow_stepevent (instance_id, step_id, type, recorded_at, attempt_number, result, error_name, error_message, next_attempt_at, wake_at, event_name, timeout_at, payload) SELECT %(instance)s::bigint, id, %(event_wait_satisfied)s::varchar, %(now)s::timestamptz, NULL, NULL, '', '', NULL, NULL, '', NULL, %(payload)s::text FROM satisfied
        ), event AS (
            INSERT INTO workerflow_inboundevent (instance_id, event_name, payload, created_at, claimed_by_id,
                claimed_at, trace_context)
            SELECT %(instance)s::bigint, %(event_name)s::varchar, %(event_payload)s::text,
                %(now)s::timestamptz, s.id, CASE WHEN s.id IS NULL THEN NULL
                ELSE %(now)s::timestamptz END, %(trace_context)s::text
            FROM (SELECT (SELECT id FROM satisfied) AS id) AS s
            RETURNING id, claimed_by_id
        ), woken AS (
            UPDATE workerflow_workflowinstance SET wake_requested = true, updated_at = %(now)s::timestamptz,
                alarm_at = CASE WHEN %(leased)s::boolean THEN alarm_at
                    ELSE %(now)s::timestamptz END,
                alarm_cause = CASE WHEN %(leased)s::boolean THEN alarm_cause
                    WHEN EXISTS (SELECT 1 FROM satisfied) THEN %(cause_event)s::varchar
                    ELSE '' END,
                bell_at = CASE WHEN %(bell)s::boolean THEN %(now)s::timestamptz
                    ELSE bell_at END
            WHERE id = %(instance)s::bigint
                AND (%(admit)s::boolean OR EXISTS (SELECT 1 FROM satisfied))
            RETURNING id, priority
        ), bell AS (
            INSERT INTO django_q_ormq ("key", "payload", "lock", "workerflow_priority")
            SELECT %(list_key)s::varchar, %(bell_payload)s::text, %(now)s::timestamptz, priority
            FROM woken WHERE %(bell)s::boolean
        )
        SELECT event.id, event.claimed_by_id, EXISTS (SELECT 1 FROM woken),
            CASE WHEN event.claimed_by_id IS NULL THEN ARRAY(
                SELECT event_name FROM workerflow_step
                WHERE instance_id = %(instance)s::bigint AND type = %(type_wait)s::varchar
                    AND state = %(state_waiting)s::varchar
                ORDER BY created_at, id
            ) END
        FROM event
