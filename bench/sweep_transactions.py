"""The sweeper's longest transaction over a backlog of instances, on PostgreSQL.

    createdb -h 127.0.0.1 -U postgres wf_sweep
    WORKERFLOW_DB=postgres WORKERFLOW_PG_NAME=wf_sweep python -m bench.sweep_transactions

Inserts ``--instances`` running instances (the scale scenario's sleeping shape), half of them
overdue and half with an alarm coming within the bell horizon and no bell yet: a sweeper
pass rings every one of them. A second connection samples ``pg_stat_activity`` every
millisecond for the sweeping connection's open transaction; the longest it saw is how long
the sweeper held instance rows locked at once. It prints figures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from datetime import timedelta


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--instances", type=int, default=2_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0, interactive=False)
    from django.db import connection

    if connection.vendor != "postgresql":
        raise SystemExit("Run it on PostgreSQL: WORKERFLOW_DB=postgres WORKERFLOW_PG_NAME=...")
    longest, passes, rang = [], [], 0
    for _ in range(args.repeats):
        held, seconds, rang = one_pass(args.instances)
        longest.append(held)
        passes.append(seconds)
    print(
        f"sweep of {args.instances:,} instances ({rang} bells rung): longest transaction "
        f"median {statistics.median(longest) * 1000:.0f} ms (max {max(longest) * 1000:.0f} ms) "
        f"over {args.repeats} passes; whole pass median {statistics.median(passes) * 1000:.0f} ms"
    )


def one_pass(count: int) -> tuple[float, float, int]:
    """The longest transaction seen, the pass's seconds, and the bells it rang."""
    from django.db import connection, connections

    from bench import scale
    from django_workerflow.models import WorkflowInstance
    from django_workerflow.runtime import sweeping
    from django_workerflow.values.clock import now as clock_now

    scale.empty_engine_tables()
    scale.insert_sleeping_instances(count, count // 2)
    now = clock_now()
    WorkflowInstance.objects.filter(alarm_at__gt=now).update(alarm_at=now + timedelta(minutes=2))
    scale.analyze()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    stop = threading.Event()
    seen = [0.0]

    def sample() -> None:
        with connections["default"].cursor() as cursor:
            while not stop.is_set():
                cursor.execute(
                    "SELECT extract(epoch FROM clock_timestamp() - xact_start) "
                    "FROM pg_stat_activity WHERE pid = %s AND state <> 'idle'",
                    [pid],
                )
                row = cursor.fetchone()
                if row and row[0] is not None:
                    seen[0] = max(seen[0], float(row[0]))
                time.sleep(0.001)
        connections["default"].close()

    sampler = threading.Thread(target=sample)
    sampler.start()
    began = time.perf_counter()
    rang = sweeping.sweep()
    seconds = time.perf_counter() - began
    stop.set()
    sampler.join()
    return seen[0], seconds, rang


if __name__ == "__main__":
    main()
