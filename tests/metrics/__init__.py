"""The metrics view, its text format, the fleet's totals and the process counters
(django_workerflow/metrics.py, process_counters.py)."""
