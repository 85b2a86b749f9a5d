"""Unit tests of the core modules, one folder per layer of the package (as procrastinate's
``tests/unit`` mirrors its code): each tests its module's own contract on a real database.
The behaviour suites beside them (``tests/test_*.py``) test features through the public API."""
