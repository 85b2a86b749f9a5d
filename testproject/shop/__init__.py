"""Example shop app that uses django-workerflow."""
