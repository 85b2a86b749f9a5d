"""An event's idempotency key: one event per key and instance (send_event's retries)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("workerflow", "0018_step_event_view")]

    operations = [
        migrations.AddField(
            model_name="inboundevent",
            name="idempotency_key",
            field=models.CharField(blank=True, max_length=200, null=True),
        ),
        migrations.AddConstraint(
            model_name="inboundevent",
            constraint=models.UniqueConstraint(
                condition=models.Q(("idempotency_key__isnull", False)),
                fields=("instance", "idempotency_key"),
                name="workerflow_event_idempotency",
            ),
        ),
    ]
