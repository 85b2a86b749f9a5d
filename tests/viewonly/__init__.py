"""A URLconf whose view module declares a workflow definition: W011's case, imported only
when the URLconf is (tests/definition/test_drift.py)."""
