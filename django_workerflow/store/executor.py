"""Running the named statements of :mod:`.sql`, the one place that does: the hot path's on
PostgreSQL bound and prepared on the server, elsewhere and off the hot path as they are.

Django's psycopg cursors bind on the client: every parameter is quoted into the text in
Python and the server parses the whole text again. The hot statements instead go through
a psycopg ``Cursor`` (binding on the server) that prepares each statement the first time a
connection runs it and then only binds its parameters: planned once per connection, and
no quoting in Python. The cursor is wrapped by Django as its own are, so
``connection.execute_wrapper`` and the translation of database errors apply as to any
query; while Django logs queries (``DEBUG``, a test capturing them) the statements are
bound on the client instead, so that the log shows them.

psycopg prepares nothing while the connection's ``prepare_threshold`` is None, which is how
Django opens it; the first prepared statement sets it to a count no query reaches, so the
statements of any other cursor are still never prepared. Protocol-level prepared statements
are what PgBouncer (1.21 and newer, ``max_prepared_statements``) keeps across transaction
pooling; turn them off with ``WORKERFLOW_PREPARED_STATEMENTS = False`` behind an older one.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from typing import Any

from django_workerflow.conf import settings
from django_workerflow.store.sql import statement

#: ``prepare_threshold`` set on a connection Django opened with None (see the module's
#: docstring): only the statements run with ``prepare=True`` are prepared.
NO_AUTOMATIC_PREPARING = 2**31 - 1


@functools.cache
def _names(text: str) -> tuple[str, ...]:
    """The parameters ``text`` names (``%(name)s``), each once."""
    return tuple(dict.fromkeys(re.findall(r"%\((\w+)\)s", text)))


def _bound(text: str, values: Mapping[str, Any]) -> dict[str, Any]:
    # Only the parameters the statement names: the driver binds (and Django's SQLite
    # wrapper rewrites) every key it is given.
    return {key: values[key] for key in _names(text)}


def execute_plain(cursor: Any, name: str, values: Mapping[str, Any]) -> None:
    """Run the statement ``name`` on ``cursor`` as it is, never prepared: the statements
    off the hot path."""
    text = statement(cursor.db.vendor, name)
    cursor.execute(text, _bound(text, values))


def execute(cursor: Any, name: str, values: Mapping[str, Any]) -> Any:
    """Run the statement ``name`` (prepared on PostgreSQL, unless
    WORKERFLOW_PREPARED_STATEMENTS is off) and return the cursor that holds its rows."""
    text = statement(cursor.db.vendor, name)
    return execute_composed(cursor, name, text, _bound(text, values))


def execute_composed(
    cursor: Any, name: str, text: str, values: Sequence[Any] | Mapping[str, Any]
) -> Any:
    """Run ``text``, a statement composed at run time (its parameters ``%s`` in the order of
    ``values``, or ``%(name)s`` of a mapping that may hold more), prepared as
    :func:`execute`'s; return the cursor that holds its rows. ``name`` labels it."""
    params = _bound(text, values) if isinstance(values, Mapping) else values
    db = cursor.db
    if db.vendor != "postgresql" or not settings.PREPARED_STATEMENTS:
        cursor.execute(text, params)
        return cursor
    if db.queries_logged:
        # DEBUG, or a test capturing queries: Django logs the text psycopg sent, and of a
        # prepared run psycopg keeps none. Bound on the client, the log shows the statement.
        cursor.execute(_labelled(name, text), params)
        return cursor
    preparing = _preparing_cursor(db)
    preparing.execute(_labelled(name, text), params)
    return preparing


@functools.cache
def _labelled(name: str, text: str) -> str:
    """``text`` behind a comment naming it: sent once per connection (preparing), it names
    the statement in ``pg_prepared_statements``, the server's log and query wrappers."""
    return f"/* workerflow_{name} */ {text}"


def _preparing_cursor(db: Any) -> Any:
    """A cursor of ``db``'s connection that binds on the server and prepares what it runs,
    wrapped as Django wraps its own (execute wrappers, database errors)."""
    raw = db.connection
    if raw.prepare_threshold is None:
        raw.prepare_threshold = NO_AUTOMATIC_PREPARING
    return db.make_cursor(_preparing_class()(raw))


@functools.cache
def _preparing_class() -> type:
    # Late: psycopg is only there on PostgreSQL.
    import psycopg

    class PreparingCursor(psycopg.Cursor[Any]):
        """Binds parameters on the server and prepares every statement it runs (Django's
        cursor wrapper calls ``execute`` without psycopg's ``prepare``)."""

        def execute(self, query: Any, params: Any = None, **options: Any) -> Any:
            return super().execute(query, params, **{**options, "prepare": True})

    return PreparingCursor
