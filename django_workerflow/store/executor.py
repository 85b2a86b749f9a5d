"""Running the statements of :mod:`.sql`, the one place that does (:func:`execute`): the hot
path's on PostgreSQL bound and prepared on the server, elsewhere and off the hot path as
they are.

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


def execute(
    cursor: Any,
    name: str,
    values: Sequence[Any] | Mapping[str, Any] | None = None,
    *,
    text: str | None = None,
    prepare: bool = True,
) -> Any:
    """Run the statement ``name`` on ``cursor`` and return the cursor that holds its rows:
    the one way the engine runs SQL.

    ``name`` is a statement of :mod:`.sql` (its text for the cursor's database), unless
    ``text`` gives a statement composed at run time, which ``name`` then only labels; its
    parameters are ``%(name)s`` of the mapping ``values`` (which may hold more) or ``%s``
    in the order of the sequence ``values`` (None: it has none). On PostgreSQL it is
    prepared, unless ``prepare`` is False (the statements off the hot path) or
    WORKERFLOW_PREPARED_STATEMENTS is off.
    """
    db = cursor.db
    if text is None:
        text = statement(db.vendor, name)
    params = _bound(text, values) if isinstance(values, Mapping) else values
    if not prepare or db.vendor != "postgresql" or not settings.PREPARED_STATEMENTS:
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
