from django.apps import AppConfig, apps
from django.conf import settings
from django.db.models.signals import post_migrate
from django.utils.module_loading import autodiscover_modules


def sync_workflow_schedules(using: str = "default", **_: object) -> None:
    """post_migrate: keep the WorkflowSchedule rows in sync with the definitions."""
    # An AppConfig module is imported before the models are.
    from django_workerflow.runtime.flow.schedules import sync_after_migrate

    sync_after_migrate(using)


def ensure_verdict_schedule(using: str = "default", **_: object) -> None:
    """post_migrate: the schedule of the replay verdicts' background pass."""
    # An AppConfig module is imported before the models are.
    from django_workerflow.deploy.verdicts import ensure_schedule

    ensure_schedule(using)


def uses_task_backend() -> bool:
    """True when a ``TASKS`` backend is django_workerflow's (its module then imports)."""
    backends = getattr(settings, "TASKS", None) or {}
    return any(
        str(params.get("BACKEND", "")).startswith("django_workerflow.task_backend.")
        for params in backends.values()
    )


class WorkerflowConfig(AppConfig):
    name = "django_workerflow"
    label = "workerflow"
    verbose_name = "Workflows"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django_workerflow import checks  # noqa: F401 - registers the system checks

        # An AppConfig module is imported before the models are.
        from django_workerflow.workers.sweeper_schedule import ensure_sweeper_schedule

        # Import every installed app's `workflows` module so its definitions register.
        autodiscover_modules("workflows")
        if uses_task_backend():
            # Late: the backend imports django.tasks (or its backport), which a project that
            # does not name it in TASKS may not have.
            from django_workerflow.task_backend import install

            install()  # workers define a task's definition when they first meet it
        post_migrate.connect(ensure_sweeper_schedule, sender=self)
        post_migrate.connect(sync_workflow_schedules, sender=self)
        post_migrate.connect(ensure_verdict_schedule, sender=self)
        if apps.is_installed("django_q"):
            # Late: django_q.signals loads django-q2's models, there only when it is installed;
            # and an AppConfig module is imported before the models are.
            from django_q.signals import post_execute_in_worker, post_spawn, pre_execute

            from django_workerflow.deploy import verdicts
            from django_workerflow.runtime.tick import recheck_unregistered
            from django_workerflow.store import outage
            from django_workerflow.workers import handled_bell, task_lines
            from django_workerflow.workers.sweep_chain import seed_after_outage, seed_on_spawn

            post_spawn.connect(seed_on_spawn, dispatch_uid="workerflow-heartbeat-seed")
            # A worker started after a deploy runs at once what an older one could not.
            post_spawn.connect(recheck_unregistered, dispatch_uid="workerflow-recheck-unregistered")
            # A worker that runs new code checks the replay verdicts for it at once.
            post_spawn.connect(verdicts.queue_on_spawn, dispatch_uid="workerflow-replay-verdicts")
            # A tick that finishes its instance acknowledges its bell in its own commit.
            pre_execute.connect(handled_bell.handling, dispatch_uid="workerflow-handled-bell")
            post_execute_in_worker.connect(
                handled_bell.handled, dispatch_uid="workerflow-handled-bell"
            )
            # A link that ran during an outage failed and queued no next one.
            outage.when_back(seed_after_outage)
            task_lines.install()  # django-q2's lines about our own tasks go to DEBUG
