from django.apps import AppConfig


class ClusterAppConfig(AppConfig):
    """Installed under pytest, and in qcluster subprocesses with ``WORKERFLOW_TEST_APPS=1``."""

    name = "tests.clusterapp"
    label = "clusterapp"
    verbose_name = "Cluster test workflows"
