"""The benchmark suite of django-workerflow (issue 5): ``make bench`` or ``python -m bench``.

``bench.run`` measures one database in its own process; ``bench.report`` prints the table.
"""
