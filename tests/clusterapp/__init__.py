"""A test-only Django app whose workflows the qcluster subprocesses of tests/cluster run."""
