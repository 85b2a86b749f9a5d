"""Benchmarks of django-workerflow with real qcluster processes (``python -m bench``)."""
