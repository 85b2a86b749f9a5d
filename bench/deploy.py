"""Scenarios ``check_replay`` and ``recovery``: deploy safety. How fast ``check-replay``
replays live instances, and how long a worker killed mid-step holds up its instance with the
default settings.

- check-replay: ``sizes.check_replay_instances`` instances of ``bench-deploy`` (20 run
  steps, then asleep) are run inline, then ``manage.py workerflow check-replay --name
  bench-deploy`` replays them all; the figure is instances per second.
- kill-to-retry: a cluster runs with the engine's default settings (a 12 s lease renewed
  every 4 s, a sweep every 5 s; neither variable is passed on); a worker is SIGKILLed at a
  random moment of a long callback, and the figure is the time from the kill to the retry's
  ``attempt_started`` (recorded by the worker that takes the instance over).
"""

from __future__ import annotations

import os
import random
import signal
import time
from io import StringIO
from pathlib import Path
from typing import Any

from .common import Sizes, Stopwatch, distribution, wait_until

#: Removed from the cluster's environment, so that it runs with the defaults.
TUNING = ("WORKERFLOW_LEASE_SECONDS", "WORKERFLOW_SWEEP_SECONDS", "WORKERFLOW_SWEEP_IDLE_SECONDS")


def check_replay(sizes: Sizes, progress: Any) -> dict[str, Any]:
    from django.core.management import call_command

    from django_workerflow import start
    from django_workerflow.runtime.tick import tick
    from django_workerflow.workers import bells

    count = sizes.check_replay_instances
    progress(f"running {count:,} instances of 20 steps")
    with bells.suppressed():
        for index in range(count):
            instance = start("bench-deploy", key=f"deploy-{index}")
            tick(instance.pk)
    progress("check-replay")
    out = StringIO()
    with Stopwatch() as watch:
        call_command("workerflow", "check-replay", "--name", "bench-deploy", stdout=out)
    summary = out.getvalue().strip().splitlines()[-1]
    if f"Checked {count} instances" not in summary or "0 would break" not in summary:
        raise RuntimeError(f"check-replay did not replay every instance cleanly: {summary}")
    return {
        "instances": count,
        "steps_each": 20,
        "seconds": watch.seconds,
        "cpu_seconds": watch.cpu_seconds,
        "instances_per_second": count / watch.seconds,
    }


def kill_to_retry(sizes: Sizes, workdir: Path, progress: Any) -> dict[str, Any]:
    from .cluster import running_cluster, warm_up

    saved = {name: os.environ.pop(name, None) for name in TUNING}
    try:
        with running_cluster(workdir / "qcluster-recovery.log"):
            warm_up("recovery")
            seconds = [_one_kill(index, workdir, progress) for index in range(sizes.kills)]
    finally:
        for name, value in saved.items():
            if value is not None:
                os.environ[name] = value
    return {"settings": "defaults", "kill_to_retry": distribution(seconds)}


def _one_kill(index: int, workdir: Path, progress: Any) -> float:
    from django_workerflow import start
    from django_workerflow.models import Step
    from django_workerflow.values.clock import now

    from .cluster import attempts_started_at

    pidfile = workdir / f"crash-{index}.pid"
    instance = start("bench-crash", key=f"crash-{index}", input={"pidfile": str(pidfile)})
    pid = int(
        wait_until(lambda: pidfile.exists() and pidfile.read_text(), timeout=60, what="a pid")
    )
    # Anywhere between two lease renewals (every 4 s with the default 12 s lease).
    time.sleep(random.uniform(0.5, 4.5))
    killed = now()
    os.kill(pid, signal.SIGKILL)
    retried = wait_until(
        lambda: attempts_started_at(Step.objects.filter(instance=instance), 2).get(instance.key),
        timeout=120,
        what=f"the retry of crash-{index}",
    )
    seconds = (retried - killed).total_seconds()
    progress(f"kill {index + 1}: retry {seconds:.1f} s after the kill")
    return seconds
