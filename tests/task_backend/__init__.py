"""Django's task backend on workflows (django_workerflow/task_backend.py, tasks.py)."""
