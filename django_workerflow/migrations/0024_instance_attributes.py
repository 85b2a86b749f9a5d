"""Searchable attributes: one nullable JSON column, and on PostgreSQL its GIN index.

Adding a nullable column rewrites no row; an instance without attributes keeps it NULL.
The index (``jsonb_path_ops``: the containment operator only, a third of the default
opclass's size) serves ``filter(attributes__<name>=value)``, which the field compiles to
containment on PostgreSQL (``models/attributes.py``). It is partial: a start without
attributes writes no entry to it (containment implies NOT NULL, so the planner uses it for
every attribute filter). SQLite gets no index: its filters read ``json_extract`` per row.
"""

from django.db import migrations

import django_workerflow.models.attributes

TABLE = "workerflow_workflowinstance"
INDEX = django_workerflow.models.attributes.INDEX_NAME


def create_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        quote = schema_editor.quote_name
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {quote(INDEX)} ON {quote(TABLE)} "
            f"USING gin ({quote('attributes')} jsonb_path_ops) "
            f"WHERE {quote('attributes')} IS NOT NULL"
        )


def drop_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX IF EXISTS {schema_editor.quote_name(INDEX)}")


class Migration(migrations.Migration):
    dependencies = [
        ("workerflow", "0023_instance_timeout"),
    ]

    operations = [
        migrations.AddField(
            model_name="workflowinstance",
            name="attributes",
            field=django_workerflow.models.attributes.AttributesField(
                blank=True, default=None, null=True
            ),
        ),
        migrations.RunPython(create_index, drop_index, elidable=False),
    ]
