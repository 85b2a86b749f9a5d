"""Django's tasks contract, point by point, on our backend.

Each test states one behaviour that Django 6.1's ``tests/tasks`` or the django-tasks
backport's database backend tests assert of a backend, checked here through the public API
on both databases and both Django lines (``django.tasks`` on Django 6, the backport on 5.2).
docs/tasks.md has the table of contract points and where each is tested.
"""
