"""``StepEvent`` reads the whole step history again: a view over the stored events and the
two a run step keeps on its row.

Since 0016 a run step created by the engine (``derived_attempt_events``) stores neither its
first attempt's start nor its success: its row holds them (``created_at``; ``resolved_at``
and the result). The view ``workerflow_stepevent_history`` unions the stored events
(``workerflow_stepevent``, unchanged) with those two, so every query on the public model sees
every event. A derived event is not added where the same (step, type, attempt) is stored (a
release from before 0016 may finish a step this one started). Derived rows get negative
primary keys: the start ``-2 * step - 1``, the success ``-2 * step``.

Models: the table's model becomes ``StoredStepEvent`` (the engine's, private); ``StepEvent``
is an unmanaged model over the view. The table, its indexes and its rows do not change.
Going back drops the view.
"""

from django.db import migrations, models

import django_workerflow.models

VIEW = "workerflow_stepevent_history"

COLUMNS = (
    "id, instance_id, step_id, type, attempt_number, result, error_name, error_message, "
    "next_attempt_at, wake_at, event_name, timeout_at, payload, recorded_at, traceback"
)


def derived(event_type: str, pk: str, attempt: str, result: str, at: str, where: str) -> str:
    """The events of one kind derived from the step rows, unless stored already."""
    return f"""
    SELECT {pk}, s.instance_id, s.id, '{event_type}', {attempt}, {result}, '', '', NULL,
        NULL, '', NULL, NULL, {at}, ''
    FROM workerflow_step s
    WHERE s.derived_attempt_events{where} AND NOT EXISTS (
        SELECT 1 FROM workerflow_stepevent e
        WHERE e.step_id = s.id AND e.type = '{event_type}' AND e.attempt_number = {attempt})"""


# The same text on PostgreSQL and SQLite: a boolean column is a condition on both, and each
# pushes a filter on the view (``instance_id = ...``) into the three branches.
CREATE_VIEW = f"""
CREATE VIEW {VIEW} AS
    SELECT {COLUMNS} FROM workerflow_stepevent
    UNION ALL{derived("attempt_started", "-2 * s.id - 1", "1", "NULL", "s.created_at", "")}
    UNION ALL{
    derived(
        "attempt_succeeded",
        "-2 * s.id",
        "s.attempt_count",
        "s.result",
        "s.resolved_at",
        " AND s.state = 'succeeded' AND s.resolved_at IS NOT NULL",
    )
}
"""
DROP_VIEW = f"DROP VIEW IF EXISTS {VIEW}"


class Migration(migrations.Migration):
    dependencies = [("workerflow", "0017_bell_notify_once")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunSQL(CREATE_VIEW, DROP_VIEW)],
            state_operations=[
                migrations.RenameModel("StepEvent", "StoredStepEvent"),
                migrations.AlterModelTable("storedstepevent", "workerflow_stepevent"),
                migrations.AlterModelOptions(
                    name="storedstepevent",
                    options={"ordering": ["recorded_at", "id"], "verbose_name": "step event"},
                ),
                migrations.AlterField(
                    model_name="storedstepevent",
                    name="instance",
                    field=models.ForeignKey(
                        on_delete=models.deletion.CASCADE,
                        related_name="+",
                        to="workerflow.workflowinstance",
                    ),
                ),
                migrations.AlterField(
                    model_name="storedstepevent",
                    name="step",
                    field=models.ForeignKey(
                        on_delete=models.deletion.CASCADE, related_name="+", to="workerflow.step"
                    ),
                ),
                migrations.CreateModel(
                    name="StepEvent",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        (
                            "type",
                            models.CharField(
                                choices=[
                                    ("attempt_started", "Attempt Started"),
                                    ("attempt_succeeded", "Attempt Succeeded"),
                                    ("attempt_failed", "Attempt Failed"),
                                    ("sleep_waiting", "Sleep Waiting"),
                                    ("sleep_elapsed", "Sleep Elapsed"),
                                    ("wait_waiting", "Wait Waiting"),
                                    ("wait_satisfied", "Wait Satisfied"),
                                    ("wait_timed_out", "Wait Timed Out"),
                                    ("child_waiting", "Child Waiting"),
                                    ("child_finished", "Child Finished"),
                                ],
                                max_length=24,
                            ),
                        ),
                        ("attempt_number", models.PositiveIntegerField(blank=True, null=True)),
                        (
                            "result",
                            django_workerflow.models.JSONTextField(blank=True, null=True),
                        ),
                        ("error_name", models.CharField(blank=True, default="", max_length=200)),
                        ("error_message", models.TextField(blank=True, default="")),
                        ("next_attempt_at", models.DateTimeField(blank=True, null=True)),
                        ("wake_at", models.DateTimeField(blank=True, null=True)),
                        ("event_name", models.CharField(blank=True, default="", max_length=200)),
                        ("timeout_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "payload",
                            django_workerflow.models.JSONTextField(blank=True, null=True),
                        ),
                        ("recorded_at", models.DateTimeField()),
                        ("traceback", models.TextField(blank=True, default="")),
                        (
                            "instance",
                            models.ForeignKey(
                                db_constraint=False,
                                on_delete=models.deletion.DO_NOTHING,
                                related_name="step_events",
                                to="workerflow.workflowinstance",
                            ),
                        ),
                        (
                            "step",
                            models.ForeignKey(
                                db_constraint=False,
                                on_delete=models.deletion.DO_NOTHING,
                                related_name="events",
                                to="workerflow.step",
                            ),
                        ),
                    ],
                    options={
                        "db_table": VIEW,
                        "managed": False,
                        "ordering": (
                            "recorded_at",
                            "step_id",
                            models.OrderBy(
                                models.Case(
                                    models.When(id__gte=0, then=models.Value(1)),
                                    models.When(then=models.Value(0), type="attempt_started"),
                                    default=models.Value(2),
                                )
                            ),
                            "id",
                        ),
                    },
                ),
            ],
        )
    ]
