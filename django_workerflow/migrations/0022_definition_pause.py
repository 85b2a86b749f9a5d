"""Definition pauses: the switch per paused definition and the audit of pauses and resumes."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("workerflow", "0021_debounced_event"),
    ]

    operations = [
        migrations.CreateModel(
            name="DefinitionPause",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("definition_name", models.CharField(max_length=200, unique=True)),
                ("reason", models.TextField()),
                ("paused_by", models.CharField(blank=True, max_length=150)),
                ("paused_at", models.DateTimeField()),
            ],
            options={
                "ordering": ["definition_name"],
                "permissions": [("pause_definition", "Can pause and resume whole definitions")],
            },
        ),
        migrations.CreateModel(
            name="DefinitionPauseRecord",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("definition_name", models.CharField(max_length=200)),
                (
                    "action",
                    models.CharField(
                        choices=[("paused", "Paused"), ("resumed", "Resumed")], max_length=20
                    ),
                ),
                ("actor", models.CharField(blank=True, max_length=150)),
                ("reason", models.TextField(blank=True)),
                ("at", models.DateTimeField()),
            ],
            options={
                "ordering": ["-at", "-id"],
                "indexes": [
                    models.Index(
                        fields=["definition_name", "-at"], name="workerflow_pause_record_name"
                    )
                ],
            },
        ),
    ]
