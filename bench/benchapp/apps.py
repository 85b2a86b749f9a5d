from django.apps import AppConfig


class BenchAppConfig(AppConfig):
    """Installed by bench/settings.py; its ``workflows`` module registers the definitions."""

    name = "bench.benchapp"
    label = "benchapp"
    verbose_name = "Benchmark workflows"
