"""Spans in tests: an SDK tracer provider that keeps what it records in memory.

The provider is this test's only: it stands in for the global one (which OpenTelemetry
lets a process set once) while the test runs, and the global one is back after it, so
ticks in other tests make no spans and store no trace context.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


class Spans:
    """The spans a test's provider finished, and a tracer for the test's own spans."""

    def __init__(self, provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
        self.provider = provider
        self.exporter = exporter
        self.tracer = provider.get_tracer("tests")

    def finished(self, name: str | None = None) -> list[ReadableSpan]:
        """The finished spans (named ``name``), oldest first."""
        spans = self.exporter.get_finished_spans()
        return [span for span in spans if name is None or span.name == name]

    def ticks(self) -> list[ReadableSpan]:
        return self.finished("workerflow.tick")

    def steps(self) -> list[ReadableSpan]:
        return self.finished("workerflow.step")


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[Spans]:
    """A :class:`Spans`: the provider every ``trace.get_tracer()`` returns during the test."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    # The global provider, set for this test only (set_tracer_provider() cannot be undone).
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", provider)
    yield Spans(provider, exporter)
    provider.shutdown()
