"""Helpers shared by the layers' tests that are not fixtures: rows of an instance, factories,
the console's URLs, flow-control definitions, threads, spans, bad values."""
