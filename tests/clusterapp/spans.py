"""Spans of a cluster process, written to a file the test reads: one JSON object a line.

:class:`~tests.clusterapp.apps.ClusterAppConfig` installs it when the cluster's
environment names the file (``WORKERFLOW_TEST_SPANS_FILE``); the exporter runs at each
span's end, in whichever process ended it, and appends its line.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult


class FileSpanExporter(SpanExporter):
    """Appends each finished span to ``path``: its name, ids, attributes, events, links."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self.path.open("a") as file:
            for span in spans:
                file.write(json.dumps(_described(span)) + "\n")
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def _described(span: ReadableSpan) -> dict[str, object]:
    context = span.get_span_context()
    return {
        "name": span.name,
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent_id": f"{span.parent.span_id:016x}" if span.parent else None,
        "status": span.status.status_code.name,
        "attributes": dict(span.attributes or {}),
        "events": [event.name for event in span.events],
        "links": [f"{link.context.span_id:016x}" for link in span.links],
    }


def install(path: str) -> None:
    """Export every span of this process (and the workers it forks) to ``path``."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(Path(path))))
    trace.set_tracer_provider(provider)
