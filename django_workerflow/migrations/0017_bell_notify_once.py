"""PostgreSQL: a transaction notifies ``workerflow_bell`` once per queue, however many bells
it queues.

0014's trigger sent a notification per inserting statement (five starts in one ``atomic()``
sent five). The function now keeps the due time a transaction announced for a queue in a
setting local to the transaction (``workerflow.bell_<the key in hex>``: a setting's name
allows identifier characters only), and notifies again only for a bell due earlier than
that, which a listener needs to wake sooner. A savepoint rolled back takes its notification
and its setting with it. PostgreSQL's own folding of duplicates would not do it: each
payload names a different time. Only the function changes; 0014's trigger calls it.

Going back restores 0014's function.
"""

from importlib import import_module

from django.conf import settings
from django.db import migrations

notify = import_module("django_workerflow.migrations.0014_bell_notify")

# Per queue key: the key and its earliest new due time, in seconds, unless the transaction
# already announced a time no later. One statement, not a loop: the trigger runs in every
# start's transaction.
BODY = f"""
BEGIN
    PERFORM pg_notify('{notify.CHANNEL}', "key" || ' ' || due),
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


def _replace_function(schema_editor, body: str) -> None:
    # The queue table as 0014 found it: present only with django-q2, on PostgreSQL.
    if notify._queue_table(schema_editor) is None:  # noqa: SLF001
        return
    quote = schema_editor.quote_name
    schema_editor.execute(
        f"CREATE OR REPLACE FUNCTION {quote(notify.FUNCTION)}() RETURNS trigger "
        f"LANGUAGE plpgsql AS $$ {body} $$"
    )


def notify_once(apps, schema_editor):
    _replace_function(schema_editor, BODY)


def notify_per_statement(apps, schema_editor):
    _replace_function(schema_editor, notify.BODY)


class Migration(migrations.Migration):
    dependencies = [("workerflow", "0016_derived_attempt_events")]
    if "django_q" in settings.INSTALLED_APPS:
        dependencies.append(
            ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more")
        )

    operations = [migrations.RunPython(notify_once, notify_per_statement, elidable=False)]
