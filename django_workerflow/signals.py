"""Signals sent by the engine."""

from django.dispatch import Signal

#: Sent after an instance's status change has committed.
#: Arguments: ``sender`` (the definition class, or None if it is not registered),
#: ``instance`` (the WorkflowInstance), ``status`` and ``previous_status``.
workflow_status_changed = Signal()
