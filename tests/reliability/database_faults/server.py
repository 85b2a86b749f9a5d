"""A PostgreSQL server of the fault tests' own: initdb into a temporary directory, pg_ctl on
a free port. The faults (every backend terminated, a fast restart, a stop) hit this server
only, never the developer's server on 5432.

The binaries are found under ``/usr/lib/postgresql/<version>/bin`` (Debian, Ubuntu) or on
the ``PATH``. PostgreSQL refuses to run as root: as root, the server runs as the
``postgres`` user (``runuser``), its directory given to that user.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

#: The database the scenario uses on the private server.
DATABASE = "workerflow_faults"
USER = "postgres"


def binaries() -> Path | None:
    """The directory of the newest installed ``pg_ctl`` and ``initdb``, or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version)
    for directory in reversed(found):
        if (Path(directory) / "initdb").exists() and (Path(directory) / "pg_ctl").exists():
            return Path(directory)
    on_path = shutil.which("pg_ctl")
    return Path(on_path).parent if on_path and shutil.which("initdb") else None


def _version(directory: str) -> int:
    name = Path(directory).parent.name
    return int(name) if name.isdigit() else 0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PrivateServer:
    """One PostgreSQL cluster in a temporary directory, listening on 127.0.0.1:``port``."""

    def __init__(self, bin_dir: Path, root: Path, port: int) -> None:
        """The server in ``root`` (see :meth:`create`); another process can drive it."""
        self.bin_dir = bin_dir
        self.port = port
        self.root = root
        self.data = root / "data"
        self.log = root / "server.log"
        self._as_postgres = os.geteuid() == 0

    @classmethod
    def create(cls, bin_dir: Path) -> PrivateServer:
        """initdb a new cluster in a temporary directory, to listen on a free port."""
        server = cls(bin_dir, Path(tempfile.mkdtemp(prefix="workerflow-pg-")), free_port())
        if server._as_postgres:
            shutil.chown(server.root, USER)
        server._run("initdb", "-D", str(server.data), "-U", USER, "--auth=trust", "-E", "UTF8")
        return server

    # Control --------------------------------------------------------------------------

    def start(self) -> float:
        """Start the server and wait until it accepts connections; return the seconds."""
        began = time.monotonic()
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
            "-c max_connections=200"
        )
        self._run("pg_ctl", "start", "-w", "-D", str(self.data), "-l", str(self.log), "-o", options)
        self.wait_ready()
        return time.monotonic() - began

    def stop(self) -> None:
        """Stop the server (fast: clients are cut off, the server shuts down cleanly)."""
        self._run("pg_ctl", "stop", "-w", "-m", "fast", "-D", str(self.data))

    def restart(self) -> float:
        """A fast restart; return the seconds until the server accepted connections again."""
        began = time.monotonic()
        self._run(
            "pg_ctl", "restart", "-w", "-m", "fast", "-D", str(self.data), "-l", str(self.log)
        )
        self.wait_ready()
        return time.monotonic() - began

    def terminate_backends(self) -> int:
        """Terminate every client backend but this call's own; return how many."""
        with self.connect() as connection:
            rows = connection.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'"
            ).fetchall()
        return len(rows)

    def create_database(self) -> None:
        with self.connect(autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{DATABASE}"')

    def destroy(self) -> None:
        """Stop the server if it runs and remove its directory."""
        subprocess.run(
            self._command("pg_ctl", "stop", "-w", "-m", "immediate", "-D", str(self.data)),
            capture_output=True,
            check=False,
        )
        shutil.rmtree(self.root, ignore_errors=True)

    # Helpers ----------------------------------------------------------------------------

    def connect(self, *, autocommit: bool = True, dbname: str = "postgres") -> psycopg.Connection:
        return psycopg.connect(
            host="127.0.0.1", port=self.port, user=USER, dbname=dbname, autocommit=autocommit
        )

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.connect().close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def _run(self, program: str, *args: str) -> None:
        result = subprocess.run(
            self._command(program, *args), capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"{program} {' '.join(args)} failed ({result.returncode}): "
                f"{result.stderr or result.stdout}"
            )

    def _command(self, program: str, *args: str) -> list[str]:
        command = [str(self.bin_dir / program), *args]
        return ["runuser", "-u", USER, "--", *command] if self._as_postgres else command
