import os

from django.apps import AppConfig


class ClusterAppConfig(AppConfig):
    """Installed by ``tests/settings.py``: under pytest and in the qcluster processes it starts."""

    name = "tests.clusterapp"
    label = "clusterapp"
    verbose_name = "Cluster test workflows"

    def ready(self) -> None:
        # A cluster started by the traces test exports its spans to the file it reads.
        path = os.environ.get("WORKERFLOW_TEST_SPANS_FILE")
        if path:
            # Late: only the cluster processes of that test configure an SDK.
            from .spans import install

            install(path)
