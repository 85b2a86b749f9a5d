"""Value types: limits, storable values, error descriptions, exceptions, status transitions
(django_workerflow/values, exceptions.py)."""
