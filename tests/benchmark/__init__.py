"""The benchmark's own tests: its report, its last run and its smoke run (bench/)."""
