WITH RECURSIVE skip(value) AS (
            SELECT (SELECT "definition_version" FROM "workerflow_workflowinstance" ORDER BY "definition_version" LIMIT 1)
            UNION ALL
            SELECT (SELECT "definition_version" FROM "workerflow_workflowinstance" WHERE "definition_version" > skip.value
                    ORDER BY "definition_version" LIMIT 1)
            FROM skip WHERE skip.value IS NOT NULL
        )
        SELECT value FROM skip WHERE value IS NOT NULL
