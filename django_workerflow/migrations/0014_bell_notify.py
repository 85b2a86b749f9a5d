"""PostgreSQL: every transaction that inserts into django-q2's queue table notifies
``workerflow_bell``, once per queue.

A statement-level trigger sends a notification per queue key the statement inserted rows
for, its payload the key and the earliest of those rows' due times (``lock``, as seconds
since the epoch: a listener waiting for an earlier bell need not wake), inside the inserting
transaction: PostgreSQL delivers it at commit, so a rolled-back bell wakes nobody. A
transaction announces a queue once: the due time it announced is kept in a setting local to
the transaction (``workerflow.bell_<the key in hex>``), and a later insert notifies again
only for a bell due earlier than that (five starts in one ``atomic()`` send one). A
savepoint rolled back takes its notification and its setting with it. PostgreSQL's own
folding of duplicates would not do it: each payload names a different time.

A trigger rather than a call beside each insert: every path that queues a row (a start's
one statement, ``start_many``, a bell armed through django-q2, django-q2's own
``async_task`` and scheduler) notifies without a statement of its own. The due-first broker
(``django_workerflow.broker``) listens. django-q2 owns the table, so the trigger is created
only when django-q2 is installed and its table exists, and dropped on the way back.

The channel's name is frozen here; ``store/bell_channel.py`` names it for the listener and a
test keeps the two equal.
"""

from django.conf import settings
from django.db import migrations

CHANNEL = "workerflow_bell"
FUNCTION = "workerflow_notify_bell"
TRIGGER = "workerflow_notify_bell"
# Per queue key: the key and its earliest new due time, in seconds, unless the transaction
# already announced a time no later (a GUC name allows identifier characters only: the key
# goes in hex). One statement, not a loop: the trigger runs in every start's transaction.
BODY = f"""
BEGIN
    PERFORM pg_notify('{CHANNEL}', "key" || ' ' || due),
        set_config(setting, coalesce(due::text, ''), true)
    FROM (
        SELECT "key", extract(epoch FROM min("lock")) AS due,
            'workerflow.bell_' || encode(convert_to("key", 'UTF8'), 'hex') AS setting
        FROM new_bells GROUP BY "key"
    ) AS queues
    -- NULL: nothing announced yet in this transaction (or a bell with no due time).
    WHERE coalesce(due < nullif(current_setting(setting, true), '')::numeric, true);
    RETURN NULL;
END
"""


def _queue_table(schema_editor):
    from django.apps import apps as global_apps

    if schema_editor.connection.vendor != "postgresql":
        return None
    if not global_apps.is_installed("django_q"):
        return None
    from django_q.models import OrmQ

    table = OrmQ._meta.db_table
    tables = schema_editor.connection.introspection.table_names()
    return table if table in tables else None


def create_trigger(apps, schema_editor):
    table = _queue_table(schema_editor)
    if table is None:
        return
    quote = schema_editor.quote_name
    schema_editor.execute(
        f"CREATE OR REPLACE FUNCTION {quote(FUNCTION)}() RETURNS trigger LANGUAGE plpgsql "
        f"AS $$ {BODY} $$"
    )
    schema_editor.execute(f"DROP TRIGGER IF EXISTS {quote(TRIGGER)} ON {quote(table)}")
    schema_editor.execute(
        f"CREATE TRIGGER {quote(TRIGGER)} AFTER INSERT ON {quote(table)} "
        "REFERENCING NEW TABLE AS new_bells FOR EACH STATEMENT "
        f"EXECUTE FUNCTION {quote(FUNCTION)}()"
    )


def drop_trigger(apps, schema_editor):
    table = _queue_table(schema_editor)
    if table is None:
        return
    quote = schema_editor.quote_name
    schema_editor.execute(f"DROP TRIGGER IF EXISTS {quote(TRIGGER)} ON {quote(table)}")
    schema_editor.execute(f"DROP FUNCTION IF EXISTS {quote(FUNCTION)}()")


class Migration(migrations.Migration):
    dependencies = [("workerflow", "0013_process_metrics_and_alarm_cause")]
    if "django_q" in settings.INSTALLED_APPS:
        dependencies.append(
            ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more")
        )

    operations = [migrations.RunPython(create_trigger, drop_trigger, elidable=False)]
