"""The workers: bells and alarms, lease renewal, health, the broker's order, logging, waiting
for a result (django_workerflow/workers)."""
