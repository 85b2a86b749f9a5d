"""The benchmark suite of django-workerflow: ``make bench`` or ``python -m bench``.

``bench.run`` measures one database in its own process; ``bench.report`` prints the table.
"""
