"""Scraping the metrics view: the URLconf the metrics tests mount (``pytest.mark.urls``),
the scrape itself and reading one sample of its text."""

from __future__ import annotations

from typing import Any

from django.test import Client, override_settings
from django.urls import path
from prometheus_client.parser import text_string_to_metric_families

import django_workerflow.metrics

urlpatterns = [path("workerflow/metrics", django_workerflow.metrics.view)]

URL = "/workerflow/metrics"
TOKEN = "s3cret-scrape-token"


def parse(text: str) -> dict[str, Any]:
    """Family name -> {(sample name, sorted labels): value}."""
    parsed: dict[str, Any] = {}
    for family in text_string_to_metric_families(text):
        parsed[family.name] = {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for sample in family.samples
        }
    return parsed


def scrape() -> dict[str, Any]:
    with override_settings(WORKERFLOW_METRICS_TOKEN=TOKEN):
        response = Client().get(URL, headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    return parse(response.content.decode())


def value(families: dict[str, Any], family: str, **labels: str) -> float | None:
    sample = "".join([family, "_total" if family.startswith("workerflow_step") else ""])
    return families[family].get((sample, tuple(sorted(labels.items()))))
