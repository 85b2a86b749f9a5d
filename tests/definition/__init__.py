"""Definitions: drift between code and rows, changes under a running instance, sensitive
payloads and their sealing (django_workerflow/definition)."""
