"""An instance's attributes on its row: written by the tick holding the lease.

As progress is (:mod:`.progress`), the attributes a pass sets are held in memory
(:class:`PendingAttributes`) and written in the transaction of the pass's next step write
or of its settle, whichever comes first: never a commit of their own, and no statement in a
tick that sets none or sets what the row holds.
"""

from __future__ import annotations

from typing import Any

from django_workerflow.store import executor, sql
from django_workerflow.values import attributes as values
from django_workerflow.values.attributes import Scalar


class PendingAttributes:
    """The attributes one tick's passes set: what the row holds, and what to write next.

    A pass replays the calls of the passes before it, so a call that sets what the row
    already holds writes nothing: only the attributes as the last call leaves them, if they
    differ from the row's.
    """

    def __init__(self, instance_pk: int, token: str, stored: dict[str, Scalar] | None) -> None:
        self.instance_pk = instance_pk
        self.token = token
        self.stored: dict[str, Scalar] = dict(stored or {})
        self.pending: dict[str, Scalar] | None = None

    def report(self, changes: dict[str, object]) -> None:
        """Hold ``changes`` (None removes an attribute) for the next write, or raise
        WorkflowInputError (and hold nothing new) for one that cannot be stored."""
        checked = values.checked(changes, what="set_attributes()")
        held = self.stored if self.pending is None else self.pending
        result = values.merged(held, checked)
        self.pending = None if values.same(result, self.stored) else result

    def write(self, cursor: Any) -> dict[str, Scalar] | None:
        """Write the held attributes in the caller's transaction (fenced by the lease:
        nothing is written once it is lost); return them, for :meth:`written` once that
        commits."""
        value = self.pending
        if value is None:
            return None
        params = sql.params(
            instance=self.instance_pk, token=self.token, attributes=values.dumps(value)
        )
        executor.execute(cursor, "write_attributes", params)
        return value

    def written(self, value: dict[str, Scalar] | None) -> None:
        """``value`` (what :meth:`write` returned) committed: it is what the row holds."""
        if value is None:
            return
        self.stored = value
        if self.pending is value:
            self.pending = None
