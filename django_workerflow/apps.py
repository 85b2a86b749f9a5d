from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules


class WorkerflowConfig(AppConfig):
    name = "django_workerflow"
    label = "workerflow"
    verbose_name = "Workflows"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Import every installed app's `workflows` module so its definitions register.
        autodiscover_modules("workflows")
