"""The models: rows, transitions, attributes, the step-event view and the events derived from a
step's row (django_workerflow/models)."""
