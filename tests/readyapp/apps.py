from django.apps import AppConfig


class ReadyAppConfig(AppConfig):
    """Installed by ``tests/settings.py``: every process registers its definitions."""

    name = "tests.readyapp"
    label = "readyapp"

    def ready(self) -> None:
        from . import flows  # noqa: F401 - registers the definitions, in every process
