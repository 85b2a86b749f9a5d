"""CPU time spent by worker processes and by the database server's backends while they drain
work, read from ``/proc`` (Linux, the server on this machine).

A drain's throughput on a small machine is bound by the CPU every process spends per item:
the workers' own (with their children: django-q2's pusher, workers and monitor), and the
server backends serving them. :class:`CpuMeter` samples both; a process that exits between
two samples keeps its last reading.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.db import connection

_TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds used) of ``pid``; None if it is gone or unreadable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICKS


def _processes() -> dict[int, tuple[int, float]]:
    """Every process of the machine: its parent pid and CPU seconds used, by pid."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None:
                found[int(entry.name)] = stat
    return found


def _tree(roots: list[int], processes: dict[int, tuple[int, float]]) -> set[int]:
    """``roots`` and every process of ``processes`` descending from them."""
    found = set(roots)
    grew = True
    while grew:
        children = {pid for pid, (parent, _cpu) in processes.items() if parent in found}
        grew = not children <= found
        found |= children
    return found


def _server_backends() -> set[int]:
    """The server processes serving this database (PostgreSQL), this connection's left out."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return {row[0] for row in cursor.fetchall()}


class CpuMeter:
    """CPU seconds of the process trees of ``roots`` (the clients) and of the database's
    backends (the server, PostgreSQL; None on SQLite, which runs inside the clients) between
    :meth:`start` and the last :meth:`sample`."""

    def __init__(self, roots: list[int]) -> None:
        self.roots = roots
        self.server = connection.vendor == "postgresql"
        self._first: dict[tuple[str, int], float] = {}
        self._last: dict[tuple[str, int], float] = {}
        self.readable = Path("/proc/self/stat").exists()

    def start(self) -> None:
        self._first = self._read()
        self._last = dict(self._first)

    def sample(self) -> None:
        self._last.update(self._read())

    def _read(self) -> dict[tuple[str, int], float]:
        if not self.readable:
            return {}
        processes = _processes()
        server = _server_backends() if self.server else set()
        return {
            (role, pid): processes[pid][1]
            for role, pids in (("clients", _tree(self.roots, processes)), ("server", server))
            for pid in pids
            if pid in processes
        }

    def seconds(self) -> dict[str, Any]:
        """CPU seconds by role (a process first seen after :meth:`start` counts whole)."""
        if not self.readable:
            return {"clients": None, "server": None}
        used: dict[str, float | None] = {"clients": 0.0, "server": 0.0 if self.server else None}
        for (role, pid), last in self._last.items():
            used[role] = (used[role] or 0.0) + last - self._first.get((role, pid), 0.0)
        return used
