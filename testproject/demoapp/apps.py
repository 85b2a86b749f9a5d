from django.apps import AppConfig


class DemoAppConfig(AppConfig):
    """Installed by ``make demo`` only (``WORKERFLOW_DEMO=1``): its schedule fires every
    minute, which the test suite's live clusters must not see."""

    name = "testproject.demoapp"
    label = "demoapp"
    verbose_name = "Demo tour workflows"
