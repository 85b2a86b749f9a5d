"""Priority under a backlog, on a real cluster: do higher-priority tasks start first?

    python -m bench.bell_claim --db sqlite            # or --db postgres [--pg-name NAME]
    python -m bench.bell_claim --db postgres --tasks 1000 --priorities 5

Enqueues ``--tasks`` trivial tasks (``bench.benchapp.tasks.nothing``) over ``--priorities``
``Task.priority`` values in a shuffled order while no cluster runs, then starts one
``qcluster`` with one worker and waits until all have finished. The order the tasks started
in is read from the engine's rows (each task's first attempt, written by the worker), and
every pair started lower priority before higher is an inversion: 0 when the backlog goes
out by priority; about half of the pairs of different priorities when it goes out in
enqueue order. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
import uuid
from collections import Counter
from pathlib import Path
from tempfile import TemporaryDirectory

from .common import wait_until
from .run import prepare_database, setup_django


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.bell_claim", description=__doc__)
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--pg-name", default="workerflow_bench_priority")
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--priorities", type=int, default=5)
    parser.add_argument("--seed", type=int, default=37)
    return parser.parse_args(argv)


def inversions(priorities_in_start_order: list[int]) -> int:
    """Pairs (a, b), a started before b, with a's priority lower than b's."""
    seen_higher: Counter[int] = Counter()  # priority -> tasks started so far with it
    count = 0
    for priority in priorities_in_start_order:
        count += sum(n for seen, n in seen_higher.items() if seen < priority)
        seen_higher[priority] += 1
    return count


def measure(args: argparse.Namespace, workdir: Path) -> None:
    import os

    from django.db import transaction

    from bench.benchapp.tasks import nothing
    from django_workerflow.models import Step

    from .cluster import running_cluster

    values = [(index % args.priorities) * 10 - 20 for index in range(args.tasks)]
    random.Random(args.seed).shuffle(values)
    priority_of: dict[str, int] = {}
    with transaction.atomic():
        for value in values:
            priority_of[nothing.using(priority=value).enqueue().id] = value
    os.environ["WORKERFLOW_BENCH_WORKERS"] = "1"
    began = time.monotonic()
    with running_cluster(workdir / "qcluster.log"):
        attempts = Step.objects.filter(step_id="attempt-1", instance__key__in=list(priority_of))
        wait_until(
            lambda: attempts.filter(state="succeeded").count() >= args.tasks,
            timeout=600,
            what=f"{args.tasks} tasks to finish",
        )
    seconds = time.monotonic() - began
    started = list(attempts.order_by("created_at", "id").values_list("instance__key", flat=True))
    order = [priority_of[key] for key in started]
    different = args.tasks * (args.tasks - 1) // 2 - sum(
        n * (n - 1) // 2 for n in Counter(values).values()
    )
    print(
        f"bell claim order, {args.db}: {args.tasks} tasks, {args.priorities} priorities, 1 worker"
    )
    print(f"  inversions (lower priority started before higher): {inversions(order)}")
    print(f"  pairs of different priority: {different}; in enqueue order: {inversions(values)}")
    print(f"  first 10 started, by priority: {order[:10]}")
    # Where each priority's tasks sat in the start order.
    for priority in sorted(set(values), reverse=True):
        where = [index for index, value in enumerate(order) if value == priority]
        print(
            f"  priority {priority:>4}: started at positions {where[0]}..{where[-1]} "
            f"(median {statistics.median(where)})"
        )
    print(f"  one worker drained them in {seconds:.1f} s (cluster start included)")
    import django_workerflow

    print(f"  engine: {Path(django_workerflow.__file__).parent}")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with TemporaryDirectory(prefix=f"bell-claim-{uuid.uuid4().hex[:6]}-") as tmp:
        workdir = Path(tmp)
        args.workdir = workdir
        print(f"database: {prepare_database(args, workdir)}")
        setup_django()
        measure(args, workdir)


if __name__ == "__main__":
    main()
