SELECT definition_name, status, count(*), sum(count(*)) OVER ()
        FROM "workerflow_workflowinstance" TABLESAMPLE SYSTEM (2.5)
        GROUP BY definition_name, status
