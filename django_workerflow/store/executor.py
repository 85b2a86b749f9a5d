"""Running the named statements of :mod:`.sql`, the one place that does: the hot path's on
PostgreSQL as server-side prepared statements (``PREPARE`` once per connection, then
``EXECUTE``; their parameters carry casts), elsewhere and off the hot path as they are.

Django opens psycopg connections with ``prepare_threshold=None``, which disables the
driver's own preparing; SQL-level ``PREPARE`` works through Django's cursor all the same.
PgBouncer in transaction mode needs ``max_prepared_statements``; or turn this off with
``WORKERFLOW_PREPARED_STATEMENTS = False``.
"""

from __future__ import annotations

import re
import weakref
import zlib
from collections.abc import Sequence
from functools import cache
from typing import Any

from django_workerflow.conf import settings
from django_workerflow.store.sql import statement


@cache
def _names(name: str) -> tuple[str, ...]:
    """The parameters the statement ``name`` names, each once."""
    return tuple(dict.fromkeys(re.findall(r"%\((\w+)\)s", statement("postgresql", name))))


@cache
def prepared(name: str) -> tuple[str, str, tuple[str, ...]]:
    """PostgreSQL: (statement name, PREPARE text, parameter names in $n order).

    Parameters carry explicit casts, so the server knows every type when preparing.
    """
    body, names = _numbered(statement("postgresql", name))
    name_in_server = f"workerflow_{name}"
    return name_in_server, f"PREPARE {name_in_server} AS {body}", names


def _numbered(text: str) -> tuple[str, tuple[str, ...]]:
    """``text`` with its ``%(name)s`` parameters as ``$n``, and the names in ``$n`` order."""
    names: list[str] = []

    def positional(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    return re.sub(r"%\((\w+)\)s", positional, text), tuple(names)


# The statements already prepared on each PostgreSQL connection (they live as long as the
# server session, and survive rollbacks).
_prepared_on: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()


def execute_plain(cursor: Any, name: str, values: dict[str, Any]) -> None:
    """Run the statement ``name`` as it is, never prepared (its parameters need not carry
    casts): the statements off the hot path."""
    # Only the parameters the statement names: the driver binds (and Django's SQLite
    # wrapper rewrites) every key it is given.
    cursor.execute(statement(cursor.db.vendor, name), {key: values[key] for key in _names(name)})


def execute(cursor: Any, name: str, values: dict[str, Any]) -> None:
    """Run the statement ``name``; on PostgreSQL as a server-side prepared statement
    (planned once per connection) unless WORKERFLOW_PREPARED_STATEMENTS is off."""
    vendor = cursor.db.vendor
    if vendor != "postgresql" or not settings.PREPARED_STATEMENTS:
        # execute_plain's line, not a call to it: every step's statements come this way.
        cursor.execute(statement(vendor, name), {key: values[key] for key in _names(name)})
        return
    server_name, prepare, names = prepared(name)
    _execute_prepared(cursor, server_name, prepare, [values[n] for n in names])


def _execute_prepared(cursor: Any, server_name: str, prepare: str, params: Sequence[Any]) -> None:
    """PostgreSQL: prepare ``server_name`` on this connection the first time, then run it."""
    done = _prepared_on.setdefault(cursor.db.connection, set())
    if server_name not in done:
        cursor.execute(prepare)
        done.add(server_name)
    placeholders = ", ".join(["%s"] * len(params))
    cursor.execute(f"EXECUTE {server_name}({placeholders})", params)


@cache
def _positional(name: str, text: str) -> tuple[str, str]:
    """PostgreSQL: (statement name, PREPARE text) of ``text``, whose parameters are ``%s``."""
    count = 0

    def numbered(_match: re.Match[str]) -> str:
        nonlocal count
        count += 1
        return f"${count}"

    body = re.sub(r"%s", numbered, text)
    # The text's checksum in the name: a text composed differently (other settings) is
    # prepared apart instead of running as the one prepared first.
    server_name = f"workerflow_{name}_{zlib.crc32(text.encode()):08x}"
    return server_name, f"PREPARE {server_name} AS {body}"


def execute_composed(cursor: Any, name: str, text: str, values: Sequence[Any]) -> None:
    """Run ``text``, a statement composed at run time (its parameters ``%s``, in order),
    named ``name``: on PostgreSQL prepared like :func:`execute`'s, so that it is planned
    once per connection."""
    if cursor.db.vendor != "postgresql" or not settings.PREPARED_STATEMENTS:
        cursor.execute(text, values)
        return
    server_name, prepare = _positional(name, text)
    _execute_prepared(cursor, server_name, prepare, values)


@cache
def _composed_named(name: str, text: str) -> tuple[str, str, tuple[str, ...]]:
    """PostgreSQL: (statement name, PREPARE text, parameter names in $n order) of ``text``,
    whose parameters are ``%(name)s``; named with the text's checksum, as
    :func:`_positional`'s."""
    body, names = _numbered(text)
    server_name = f"workerflow_{name}_{zlib.crc32(text.encode()):08x}"
    return server_name, f"PREPARE {server_name} AS {body}", names


def execute_composed_named(cursor: Any, name: str, text: str, values: dict[str, Any]) -> None:
    """Run ``text``, a statement composed at run time whose parameters are ``%(name)s``
    (``values`` may hold more), named ``name``: on PostgreSQL prepared like
    :func:`execute`'s."""
    server_name, prepare, names = _composed_named(name, text)
    if cursor.db.vendor != "postgresql" or not settings.PREPARED_STATEMENTS:
        cursor.execute(text, {key: values[key] for key in names})
        return
    _execute_prepared(cursor, server_name, prepare, [values[n] for n in names])
