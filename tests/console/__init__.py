"""The console: the admin's pages and actions and the ``workerflow`` command
(django_workerflow/console, django_workerflow/admin.py, management/)."""
