from django.apps import AppConfig
from django.db.models.signals import post_migrate
from django.utils.module_loading import autodiscover_modules


class WorkerflowConfig(AppConfig):
    name = "django_workerflow"
    label = "workerflow"
    verbose_name = "Workflows"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401 - registers the system checks
        from .schedules import ensure_sweeper_schedule

        # Import every installed app's `workflows` module so its definitions register.
        autodiscover_modules("workflows")
        post_migrate.connect(ensure_sweeper_schedule, sender=self)
