"""Running a definition's code: replay, step timers, patched branches, nested step ids,
failures and their tracebacks, what a step's outcome survives (django_workerflow/engine)."""
