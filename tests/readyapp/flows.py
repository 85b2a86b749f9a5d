"""Definitions that the app's ``ready()`` imports: not a ``workflows`` module."""

from django_workerflow import WorkflowDefinition


class ReadyRegistered(WorkflowDefinition):
    name = "ready-registered"
    version = "1"

    def execute(self) -> int:
        return 1
