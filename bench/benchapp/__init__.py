"""The benchmark's workflows, installed when ``WORKERFLOW_BENCH_APPS=1`` (see bench/timers.py)."""
