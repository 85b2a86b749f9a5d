"""Stored replay verdicts: one row per checked unfinished instance, in a table of its own.

A new table: no instance row is rewritten, and the tick never reads or writes it.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("workerflow", "0024_instance_attributes"),
    ]

    operations = [
        migrations.CreateModel(
            name="ReplayVerdictRecord",
            fields=[
                (
                    "instance",
                    models.OneToOneField(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        primary_key=True,
                        related_name="replay_verdict_record",
                        serialize=False,
                        to="workerflow.workflowinstance",
                    ),
                ),
                ("code", models.CharField(max_length=64)),
                ("ok", models.BooleanField()),
                ("reason", models.TextField(blank=True)),
                ("checked_at", models.DateTimeField()),
            ],
            options={
                "indexes": [
                    models.Index(fields=["code", "ok"], name="workerflow_verdict_code_ok"),
                    models.Index(
                        condition=models.Q(("ok", False)),
                        fields=["code"],
                        name="workerflow_verdict_stranded",
                    ),
                ],
            },
        ),
    ]
