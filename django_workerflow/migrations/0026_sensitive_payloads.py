"""The permission to see the sensitive values of instances (``sensitive`` paths of a
definition): a Meta change, no column."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("workerflow", "0025_replay_verdict"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="workflowinstance",
            options={
                "ordering": ["-created_at", "-id"],
                "permissions": [
                    ("pause_workflowinstance", "Can pause workflow instances"),
                    ("resume_workflowinstance", "Can resume workflow instances"),
                    ("cancel_workflowinstance", "Can cancel workflow instances"),
                    ("send_event_workflowinstance", "Can send events to workflow instances"),
                    ("retry_workflowinstance", "Can retry failed workflow instances"),
                    ("fork_workflowinstance", "Can fork workflow instances"),
                    (
                        "view_sensitive_payloads",
                        "Can view the sensitive payload values of instances",
                    ),
                ],
            },
        ),
    ]
