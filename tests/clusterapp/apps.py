from django.apps import AppConfig


class ClusterAppConfig(AppConfig):
    """Installed by ``tests/settings.py``: under pytest and in the qcluster processes it starts."""

    name = "tests.clusterapp"
    label = "clusterapp"
    verbose_name = "Cluster test workflows"
