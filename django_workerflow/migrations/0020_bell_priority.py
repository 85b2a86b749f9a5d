"""A priority on django-q2's queue table, so the due-first broker hands out a backlog of due
bells highest priority first: the ``workerflow_priority`` column and a ``(key,
workerflow_priority, lock)`` index.

The column holds the engine's priority of the instance a bell rings for (lower first, as
admission orders; a task's ``Task.priority`` negated), 0 for every other row, which
django-q2's own inserts leave to the column's default. django-q2 owns the table, so, as in
0006, the column is added only when django-q2 is installed and its table exists, and removed
on the way back.
"""

from importlib import import_module

from django.conf import settings
from django.db import migrations

queue = import_module("django_workerflow.migrations.0006_bell_queue_index")

COLUMN = "workerflow_priority"
INDEX = "workerflow_ormq_key_priority_lock"


def add_priority(apps, schema_editor):
    table = queue._queue_table(schema_editor)  # noqa: SLF001 - 0006's own helper
    if table is None:
        return
    quote = schema_editor.quote_name
    schema_editor.execute(
        f"ALTER TABLE {quote(table)} ADD COLUMN {quote(COLUMN)} integer NOT NULL DEFAULT 0"
    )
    schema_editor.execute(
        f"CREATE INDEX {quote(INDEX)} ON {quote(table)} "
        f"({quote('key')}, {quote(COLUMN)}, {quote('lock')})"
    )


def remove_priority(apps, schema_editor):
    table = queue._queue_table(schema_editor)  # noqa: SLF001 - 0006's own helper
    if table is None:
        return
    quote = schema_editor.quote_name
    schema_editor.execute(f"DROP INDEX IF EXISTS {quote(INDEX)}")
    schema_editor.execute(f"ALTER TABLE {quote(table)} DROP COLUMN {quote(COLUMN)}")


class Migration(migrations.Migration):
    dependencies = [("workerflow", "0019_event_idempotency")]
    if "django_q" in settings.INSTALLED_APPS:
        dependencies.append(
            ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more")
        )

    operations = [migrations.RunPython(add_priority, remove_priority, elidable=False)]
