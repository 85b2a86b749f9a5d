"""An index on django-q2's queue table for the due-first broker: (key, lock).

django-q2 owns the table, so the index is created here only when django-q2 is installed and
its table exists, and dropped on the way back.
"""

from django.conf import settings
from django.db import migrations

INDEX = "workerflow_ormq_key_lock"


def _queue_table(schema_editor):
    from django.apps import apps as global_apps

    if not global_apps.is_installed("django_q"):
        return None
    from django_q.models import OrmQ

    table = OrmQ._meta.db_table
    tables = schema_editor.connection.introspection.table_names()
    return table if table in tables else None


def create_index(apps, schema_editor):
    table = _queue_table(schema_editor)
    if table is not None:
        quote = schema_editor.quote_name
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {quote(INDEX)} ON {quote(table)} "
            f"({quote('key')}, {quote('lock')})"
        )


def drop_index(apps, schema_editor):
    if _queue_table(schema_editor) is not None:
        schema_editor.execute(f"DROP INDEX IF EXISTS {schema_editor.quote_name(INDEX)}")


class Migration(migrations.Migration):
    dependencies = [("workerflow", "0005_flow_control")]
    if "django_q" in settings.INSTALLED_APPS:
        dependencies.append(
            ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more")
        )

    operations = [migrations.RunPython(create_index, drop_index, elidable=False)]
