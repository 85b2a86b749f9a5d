"""The benchmark's workflows; bench/settings.py installs this app."""
