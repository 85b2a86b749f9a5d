"""Instance timeouts: the budget, the running deadline and what is left while paused.

Three nullable columns: adding them rewrites no row, and an instance without a timeout
keeps all three NULL.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("workerflow", "0022_definition_pause"),
    ]

    operations = [
        migrations.AddField(
            model_name="workflowinstance",
            name="timeout_seconds",
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="workflowinstance",
            name="deadline_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="workflowinstance",
            name="timeout_left_seconds",
            field=models.FloatField(blank=True, null=True),
        ),
    ]
