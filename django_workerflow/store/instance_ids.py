"""Instance ids drawn ahead for single starts on PostgreSQL (see
:mod:`django_workerflow.store.instance_inserts`).

A bell names its instance's id, so a start must know the id before its one statement; a
block of ids drawn from the table's sequence in one statement serves the next starts of
this process.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from django_workerflow.store import sql

#: The ids a process draws at once for its single starts.
ID_BLOCK_SIZE = 48


class IdBlock:
    """Instance ids drawn ahead from the table's sequence for this process's single starts
    (PostgreSQL): one ``SELECT nextval(...) FROM generate_series(1, size)`` per ``size``
    starts, so a start sends only its one statement.

    Ids stay unique, since the sequence hands each out once, but they are no longer in
    creation order across processes: one process may hold 101-148 while another holds
    149-196 and starts first. Within a process they still increase. Nothing orders
    instances by id to mean "created first": ``created_at`` does (admission's queue orders
    by priority, ``created_at``, then id, and its instances take admission's path, not
    this one). An id lost to a key conflict, or left in a block when the process ends, is
    a gap, as a rolled-back ``nextval`` is.

    Thread-safe (one lock). Fork-safe: a child process never uses its parent's ids (they
    are dropped after a fork, and a block remembers the process that drew it, for forks
    made without Python's at-fork hooks).
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._reset()

    def _reset(self) -> None:
        # A new lock too: another thread of the parent may have held it at the fork.
        self._lock = threading.Lock()
        self._ids: list[int] = []  # largest first: pop() takes the smallest
        self._pid = os.getpid()

    def take(self, cursor: Any) -> int:
        """The next id, drawing a new block through ``cursor`` when this one is empty."""
        with self._lock:
            if self._pid != os.getpid():
                self._ids, self._pid = [], os.getpid()
            if not self._ids:
                self._ids = sorted(draw_ids(cursor, self.size), reverse=True)
            return self._ids.pop()

    def discard(self) -> None:
        """Drop the ids left: the next take draws new ones."""
        with self._lock:
            self._ids = []

    def __len__(self) -> int:
        return len(self._ids) if self._pid == os.getpid() else 0


id_block = IdBlock(ID_BLOCK_SIZE)
if hasattr(os, "register_at_fork"):  # not on Windows, which does not fork
    os.register_at_fork(after_in_child=id_block._reset)  # noqa: SLF001 - this module's own block


def draw_ids(cursor: Any, count: int) -> list[int]:
    """PostgreSQL: ``count`` ids drawn from the instance table's sequence, in one statement
    (:data:`.sql.DRAW_INSTANCE_IDS`)."""
    cursor.execute(sql.DRAW_INSTANCE_IDS, [sql.INSTANCE, count])
    return [row[0] for row in cursor.fetchall()]
