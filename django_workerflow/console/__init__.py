"""The operations console: what the admin and ``manage.py workerflow`` show and do.

Nothing here changes an instance except through :mod:`django_workerflow.runtime`.
"""
