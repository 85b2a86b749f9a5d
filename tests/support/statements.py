"""Counting the SQL statements and transactions of a tick, and reading what PostgreSQL
prepared: the cost tests of every layer use them."""

from __future__ import annotations

from django.db import connection

from django_workerflow.runtime.tick import tick

TRANSACTION_CONTROL = ("BEGIN", "SAVEPOINT", "RELEASE", "COMMIT", "ROLLBACK")


def label(name: str) -> str:
    """The start of the comment an engine statement prepared on PostgreSQL begins with
    (:func:`django_workerflow.store.executor.execute`)."""
    return f"/* workerflow_{name}"


def prepared_on_server() -> dict[str, int]:
    """PostgreSQL: the statements this connection prepared (at the protocol level), each
    with how many times it ran."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT statement, generic_plans + custom_plans FROM pg_prepared_statements "
            "WHERE NOT from_sql"
        )
        return dict(cursor.fetchall())


class StatementCounter:
    """Counts statements, and transactions: explicit ones (BEGIN, or SAVEPOINT inside the
    test's wrapping transaction) and single statements run on their own (autocommit)."""

    def __init__(self) -> None:
        self.statements: list[str] = []
        self.transactions = 0
        # Inside a test's wrapping transaction, a statement at this savepoint depth stands
        # for a transaction of its own in production.
        self.base_depth = len(connection.savepoint_ids)

    def __call__(self, execute, sql, params, many, context):
        keyword = sql.lstrip().split(None, 1)[0].upper()
        if keyword in ("BEGIN", "SAVEPOINT"):
            self.transactions += 1
        elif keyword not in TRANSACTION_CONTROL:
            self.statements.append(sql)
            if len(context["connection"].savepoint_ids) == self.base_depth:
                self.transactions += 1
        return execute(sql, params, many, context)


def count_tick(instance_pk: int) -> StatementCounter:
    counter = StatementCounter()
    with connection.execute_wrapper(counter):
        tick(instance_pk)
    return counter


def statements_of_a_tick(instance_pk: int) -> list[str]:
    return count_tick(instance_pk).statements
