from django.apps import AppConfig


class BenchAppConfig(AppConfig):
    """Installed by testproject/settings.py when ``WORKERFLOW_BENCH_APPS=1``."""

    name = "bench.benchapp"
    label = "benchapp"
    verbose_name = "Benchmark workflows"
