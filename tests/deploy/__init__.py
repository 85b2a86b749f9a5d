"""Deploying: replay checks and verdicts, exported histories as fixtures, the stranded queue
(django_workerflow/deploy)."""
