"""Fewer index entries per start (issue 24).

- The forked-from and parent indexes become partial: only forks and children are in them
  (every query of either names an instance, which implies NOT NULL); most instances are
  neither, and each start wrote an entry to both.
- The (status, finished_at) index becomes partial: finished instances only (the purge and
  the overview bound ``finished_at``, which implies NOT NULL).
- PostgreSQL: the ``varchar_pattern_ops`` index Django adds beside a unique ``CharField``
  (``..._like``) is dropped from ``key``. It serves only ``LIKE 'prefix%'`` on the key;
  the one such query (a schedule's runs) also filters on the definition name, which
  ``workerflow_name_status`` finds. The unique index stays (``ON CONFLICT ("key")``).
"""

import django.db.models.deletion
from django.db import migrations, models

TABLE = "workerflow_workflowinstance"


def _like_index(schema_editor):
    """The name Django gave the key's pattern index (PostgreSQL only; None elsewhere)."""
    if schema_editor.connection.vendor != "postgresql":
        return None
    # No public API names it; the schema editor names it this way when it creates it.
    return schema_editor._create_index_name(TABLE, ["key"], suffix="_like")  # noqa: SLF001


def drop_like_index(apps, schema_editor):
    name = _like_index(schema_editor)
    if name is not None:
        schema_editor.execute(f"DROP INDEX IF EXISTS {schema_editor.quote_name(name)}")


def create_like_index(apps, schema_editor):
    name = _like_index(schema_editor)
    if name is not None:
        quote = schema_editor.quote_name
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {quote(name)} ON {quote(TABLE)} "
            f"({quote('key')} varchar_pattern_ops)"
        )


class Migration(migrations.Migration):
    dependencies = [("workerflow", "0014_bell_notify")]

    operations = [
        migrations.AlterField(
            model_name="workflowinstance",
            name="forked_from",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="forks",
                to="workerflow.workflowinstance",
            ),
        ),
        migrations.AlterField(
            model_name="workflowinstance",
            name="parent",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="children",
                to="workerflow.workflowinstance",
            ),
        ),
        migrations.AddIndex(
            model_name="workflowinstance",
            index=models.Index(
                condition=models.Q(("forked_from__isnull", False)),
                fields=["forked_from"],
                name="workerflow_forked_from",
            ),
        ),
        migrations.AddIndex(
            model_name="workflowinstance",
            index=models.Index(
                condition=models.Q(("parent__isnull", False)),
                fields=["parent"],
                name="workerflow_parent",
            ),
        ),
        migrations.RemoveIndex(model_name="workflowinstance", name="workerflow_status_finished"),
        migrations.AddIndex(
            model_name="workflowinstance",
            index=models.Index(
                condition=models.Q(("finished_at__isnull", False)),
                fields=["status", "finished_at"],
                name="workerflow_status_finished",
            ),
        ),
        migrations.RunPython(drop_like_index, create_like_index, elidable=False),
    ]
