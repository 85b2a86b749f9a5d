from django.apps import AppConfig


class ShopConfig(AppConfig):
    name = "testproject.shop"
    label = "shop"
    verbose_name = "Shop (example)"

    def ready(self) -> None:
        from . import signals  # noqa: F401 - connects the signal handlers
