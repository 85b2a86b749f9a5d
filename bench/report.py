"""The printed table: every scenario's figures per database, then the targets.

Results are the JSON written by ``bench.run``, one per database; a scenario that failed or
was skipped shows as such in its cells.
"""

from __future__ import annotations

from typing import Any

from .table import (
    COLUMNS,
    Results,
    Table,
    any_result,
    dig,
    flatness,
    fleet_ratio,
    ms,
    normalized_flatness,
    number,
    spread,
)
from .targets import target_blocks


def figures_table(results: Results) -> Table:
    table = Table(results)
    table.header("django-workerflow benchmark")

    sizes = any_result(results, "sequential") or {}
    table.section("1. Sequential: one workflow of N trivial run steps, inline (median)")
    for steps in sizes:
        n = f"N={int(steps):,}"

        def steps_per_second(r: dict[str, Any], steps: str = steps) -> str:
            run = dig(r, "sequential", steps)
            return f"{number(run['steps_per_second'])} steps/s"

        def per_step(r: dict[str, Any], steps: str = steps) -> str:
            run = dig(r, "sequential", steps)
            return f"{run['ms_per_step']:.3f} ms ({run['cpu_ms_per_step']:.3f} CPU)"

        def raw(r: dict[str, Any], steps: str = steps) -> str:
            run = dig(r, "sequential", steps)
            return f"{number(run['raw_commits_per_second'])}/s -> x{run['ratio_to_raw']:.2f}"

        def beside_last_run(r: dict[str, Any], steps: str = steps) -> str:
            run, last = dig(r, "sequential", steps), dig(r, "sequential_last_run", steps)
            change = run["steps_per_second"] / last["steps_per_second"] - 1
            return f"{number(last['steps_per_second'])}/s -> {change:+.0%}"

        table.row(f"{n}: steps/s", steps_per_second, "sequential")
        table.row(f"{n}: ms/step (client CPU ms/step)", per_step, "sequential")
        table.row(f"{n}: raw commit rate -> steps/s ratio to it", raw, "sequential")
        table.row(
            f"{n}: the last run's steps/s -> this run's change", beside_last_run, "sequential"
        )
    table.row(
        "the last run (artifacts/bench-<time>.json)",
        lambda r: str(dig(r, "sequential_last_run", "created")),
        "sequential",
    )
    if len(sizes) > 1:
        first, *_, last = sizes
        table.row(
            f"ms/step N={int(last):,} / N={int(first):,}",
            lambda r: f"{flatness(r):.2f}",
            "sequential",
        )
        table.row(
            "  the same, each relative to its raw commit rate",
            lambda r: f"{normalized_flatness(r):.2f}",
            "sequential",
        )

    replay_steps = any_result(results, "replay", "steps") or 0
    table.section(f"2. Replay: a tick resuming {replay_steps:,} recorded steps")
    table.row(
        "tick (replays, then sleeps again)",
        lambda r: f"{dig(r, 'replay', 'tick_ms'):.1f} ms",
        "replay",
    )
    table.row(
        "per replayed step (minus an empty tick)",
        lambda r: f"{dig(r, 'replay', 'ms_per_step'):.4f} ms",
        "replay",
    )

    table.section("3. Statements (counted with connection.execute_wrapper)")
    table.row(
        "per run step: statements / transactions",
        lambda r: "{statements:g} / {transactions:g}".format(**dig(r, "statements", "run_step")),
        "statements",
    )
    table.row(
        "per replayed step: statements / transactions",
        lambda r: "{statements:g} / {transactions:g}".format(
            **dig(r, "statements", "replayed_step")
        ),
        "statements",
    )
    table.row(
        "per tick, fixed (claim, settle): statements",
        lambda r: f"{dig(r, 'statements', 'tick_fixed_statements'):g}",
        "statements",
    )

    instances = any_result(results, "clusters", "fleet", "1", "instances") or 0
    each = any_result(results, "clusters", "fleet", "1", "steps_each") or 0
    table.section(f"4. Fleet: {instances:,} workflows x {each} steps in one burst, qcluster")
    for count in ("1", "2"):
        table.row(
            f"{count} cluster{'s' if count != '1' else ''}",
            lambda r, count=count: (
                f"{number(dig(r, 'clusters', 'fleet', count, 'steps_per_second'))} steps/s"
            ),
            "clusters",
        )
    table.row(
        "workers per cluster",
        lambda r: str(dig(r, "clusters", "q_cluster", "workers")),
        "clusters",
    )

    table.section("5. Latency, 1 cluster: min / median / p99 / max")
    for key, label in (
        ("start_to_first_step", "start -> first step started"),
        ("event_to_resume", "send_event -> next step started"),
        ("sleep_lateness", "sleep lateness"),
        ("retry_lateness", "retry (250 ms backoff) lateness"),
    ):
        table.row(
            f"{label} ({count_of(results, key)})",
            lambda r, key=key: spread(dig(r, "clusters", "latency", key)),
            "clusters",
        )
    table.row(
        "timers fired early",
        lambda r: str(dig(r, "clusters", "latency", "timer_lateness", "early")),
        "clusters",
    )

    instances = any_result(results, "scale", "instances") or 0
    due = any_result(results, "scale", "due") or 0
    table.section(f"6. Scale: {instances:,} sleeping instances, {due} of them due")
    table.row(
        "database bytes per instance",
        lambda r: f"{number(dig(r, 'scale', 'bytes_per_instance'))} B",
        "scale",
    )
    table.row(
        "bulk insert (instances, steps, events)",
        lambda r: f"{dig(r, 'scale', 'insert_seconds'):.1f} s",
        "scale",
    )
    table.row(
        "due lookup, objects.due(now) (median)",
        lambda r: f"{dig(r, 'scale', 'due_lookup_ms'):.2f} ms ({dig(r, 'scale', 'due_found')})",
        "scale",
    )
    table.row(
        "due lookup after ANALYZE (PG: autovacuum's)",
        lambda r: f"{dig(r, 'scale', 'due_lookup_analyzed_ms'):.2f} ms",
        "scale",
    )
    table.row(
        "sweeper pass, bells suppressed",
        lambda r: f"{dig(r, 'scale', 'sweep_suppressed_ms'):.1f} ms",
        "scale",
    )
    table.row(
        "sweeper pass, ringing the due bells",
        lambda r: f"{dig(r, 'scale', 'sweep_ms'):.1f} ms ({dig(r, 'scale', 'sweep_rang')})",
        "scale",
    )

    version = any_result(results, "peer", "version")
    peer_steps = any_result(results, "peer", "sequential", "steps") or 0
    table.section(f"7. Peer: DBOS Transact {version or ''}, same process, same server".strip())
    table.row(
        f"sequential N={peer_steps:,}: ours, side by side",
        lambda r: f"{number(dig(r, 'peer', 'sequential', 'ours_steps_per_second'))} steps/s",
        "peer",
    )
    table.row(
        f"sequential N={peer_steps:,}: DBOS",
        lambda r: f"{number(dig(r, 'peer', 'sequential', 'dbos_steps_per_second'))} steps/s",
        "peer",
    )
    table.row(
        "sequential: ours / DBOS",
        lambda r: f"x{dig(r, 'peer', 'sequential', 'ratio'):.2f}",
        "peer",
    )
    table.row(
        "fleet: DBOS (start_workflow, in-process)",
        lambda r: f"{number(dig(r, 'peer', 'fleet', 'steps_per_second'))} steps/s",
        "peer",
    )
    table.row("fleet: ours with 1 cluster / DBOS", lambda r: f"x{fleet_ratio(r):.2f}", "peer")

    table.section("8. Composition, 1 cluster: min / median / p99 / max")
    for key, label in (
        ("finish_to_return", "finish -> wait_result returns"),
        ("child_finish_to_parent_resume", "child finish -> parent's next step started"),
    ):
        table.row(
            f"{label} ({any_result(results, 'composition', key, 'count')})",
            lambda r, key=key: spread(dig(r, "composition", key)),
            "composition",
        )
    checked = any_result(results, "check_replay", "instances") or 0
    table.section("9. Deploy safety")
    table.row(
        f"check-replay, {checked:,} instances of 20 steps",
        lambda r: f"{number(dig(r, 'check_replay', 'instances_per_second'))} inst/s",
        "check_replay",
    )
    table.row(
        f"kill-to-retry, default settings "
        f"({any_result(results, 'recovery', 'kill_to_retry', 'count') or '-'} kills)",
        lambda r: (
            " / ".join(
                f"{dig(r, 'recovery', 'kill_to_retry', key):.1f}"
                for key in ("min", "median", "p99", "max")
            )
            + " s"
        ),
        "recovery",
    )

    queued = any_result(results, "queue", "instances") or 0
    table.section(f"10. Queue: {queued:,} instances behind max_concurrency=10, inline workers")
    table.row(
        "admissions per second while draining",
        lambda r: f"{number(dig(r, 'queue', 'admissions_per_second'))}/s",
        "queue",
    )
    table.row(
        "inversions / double admissions",
        lambda r: f"{dig(r, 'queue', 'inversions')} / {dig(r, 'queue', 'double_admissions')}",
        "queue",
    )
    table.row(
        "most instances holding a slot at once",
        lambda r: str(dig(r, "queue", "max_holding")),
        "queue",
    )

    starts_section(table, results)
    admin_section(table, results)

    table.section("13. Server cost per run step (PostgreSQL), beside the raw commit")
    for key, label in (("run_step", "run step"), ("raw_commit", "raw commit")):
        table.row(
            f"{label}: WAL bytes / server CPU",
            lambda r, key=key: server_cost_cell(dig(r, "wal", key)),
            "wal",
        )
    tasks_section(table, results)
    metrics_section(table, results)
    return table


def metrics_section(table: Table, results: Results) -> None:
    instances = any_result(results, "metrics", "instances") or 0
    processes = any_result(results, "metrics", "processes") or 0
    table.section(
        f"15. Metrics scrape at {instances:,} instances, {processes:,} process rows (PostgreSQL)"
    )
    table.row(
        "metrics.text(): median / p99",
        lambda r: f"{ms(dig(r, 'metrics', 'median'))} / {ms(dig(r, 'metrics', 'p99'))} ms",
        "metrics",
    )
    table.row(
        "the same, every row flushed again before each",
        lambda r: "{} / {} ms".format(
            ms(dig(r, "metrics", "reflushed_median")), ms(dig(r, "metrics", "reflushed_p99"))
        ),
        "metrics",
    )
    table.row(
        "its queries, once: the slowest (ms)",
        lambda r: " ".join(ms(seconds) for seconds, _ in dig(r, "metrics", "queries")[:4]),
        "metrics",
    )


def starts_section(table: Table, results: Results) -> None:
    timed = any_result(results, "starts", "start", "starts") or 0
    table.section(f"11. Starting: {timed:,} start() calls one at a time, bells written")
    table.row(
        "start(): median / p99",
        lambda r: "{} / {} ms".format(
            ms(dig(r, "starts", "start", "median")), ms(dig(r, "starts", "start", "p99"))
        ),
        "starts",
    )
    table.row(
        "raw commit (before and after) -> median's ratio",
        lambda r: "{:.3f} ms -> x{:.2f}".format(
            dig(r, "starts", "start", "raw_commit_seconds") * 1000,
            dig(r, "starts", "start", "ratio_to_raw_commit"),
        ),
        "starts",
    )
    table.row(
        "statements / transactions of one start",
        lambda r: "{statements:g} / {transactions:g}".format(**dig(r, "starts", "start")),
        "starts",
    )
    table.row(
        "statements per start, id blocks included (mean)",
        lambda r: f"{dig(r, 'starts', 'start', 'statements_mean'):.2f}",
        "starts",
    )
    many = any_result(results, "starts", "start_many", "instances") or 0
    table.row(
        f"start_many() of {many:,} instances",
        lambda r: f"{number(dig(r, 'starts', 'start_many', 'instances_per_second'))}/s",
        "starts",
    )
    for key, label in (
        ("bells", "bells due at once, ours: inversions, drain"),
        ("bells_django_q2_orm", "bells, django-q2's ORM broker: the same"),
    ):
        count = any_result(results, "starts", key, "bells") or 0
        table.row(
            f"{count:,} {label}",
            lambda r, key=key: "{}, {:.1f} s ({}/s)".format(
                dig(r, "starts", key, "inversions"),
                dig(r, "starts", key, "drain_seconds"),
                number(dig(r, "starts", key, "bells_per_second")),
            ),
            "starts",
        )


def tasks_section(table: Table, results: Results) -> None:
    table.section(
        "14. django.tasks: a trivial @task, one cluster vs django-tasks-db with as many "
        "db_workers as the cluster has workers"
    )
    table.row(
        "workers (ours) = db_workers (django-tasks-db)",
        lambda r: str(dig(r, "tasks", "workers")),
        "tasks",
    )
    for backend, name in (("ours", "ours"), ("django_tasks_db", "django-tasks-db")):

        def started(r: dict[str, Any], backend: str = backend) -> str:
            section = dig(r, "tasks", backend)
            if "skipped" in section:
                return "skipped"
            stats = section["start_latency"]
            return f"{ms(stats['median'])} / {ms(stats['p99'])} ms"

        def drained(r: dict[str, Any], backend: str = backend) -> str:
            section = dig(r, "tasks", backend)
            if "skipped" in section:
                return "skipped"
            return f"{number(section['tasks_per_second'])} tasks/s"

        def cpu(r: dict[str, Any], backend: str = backend) -> str:
            section = dig(r, "tasks", backend)
            if "skipped" in section:
                return "skipped"
            if "cpu_ms_per_task" not in section:
                return "not measured"
            used = section["cpu_ms_per_task"]
            clients, server = used["clients"], used["server"]
            if clients is None:
                return "? (no /proc)"
            if server is None:  # SQLite: the database runs inside the workers
                return f"{clients:.2f} ms"
            return f"{clients:.2f} + {server:.2f} ms"

        table.row(f"enqueue to started, {name}: median / p99", started, "tasks")
        tasks = any_result(results, "tasks", backend, "tasks") or 0
        table.row(f"{tasks:,} tasks drained, {name}", drained, "tasks")
        table.row("  CPU per task drained: workers (+ server backends)", cpu, "tasks")


def admin_section(table: Table, results: Results) -> None:
    instances = any_result(results, "admin", "instances") or 0
    table.section(f"12. Admin at {instances:,} instances (PostgreSQL): median page load")
    steps = any_result(results, "admin", "change_page_steps") or 0
    for key, label in (
        ("change_list", "instance list"),
        ("change_list_running", "instance list filtered by status"),
        ("change_page", f"page of an instance of {steps:,} steps"),
        ("overview", "overview page (Workflows, then Overview)"),
    ):
        table.row(
            label,
            lambda r, key=key: "{} ms ({} queries)".format(
                ms(dig(r, "admin", key, "median")), dig(r, "admin", key, "queries")
            ),
            "admin",
        )


def server_cost_cell(figures: dict[str, Any]) -> str:
    cpu = figures["server_cpu_ms_each"]
    return f"{number(figures['wal_bytes_each'])} B / " + ("?" if cpu is None else f"{cpu:.3f} ms")


def count_of(results: Results, key: str) -> str:
    count = any_result(results, "clusters", "latency", key, "count")
    return f"{count}" if count is not None else "-"


# Everything ---------------------------------------------------------------------------


def environment_lines(results: Results) -> list[str]:
    lines = []
    for vendor, title in COLUMNS:
        r = results.get(vendor)
        if r is None:
            continue
        env = r["environment"]
        load = r.get("load", {})
        lines.append(
            f"{title}: {env['server']}; Python {env['python']}, Django {env['django']}, "
            f"{env['cpus']} CPUs; load average before {fmt_load(load.get('before'))}, "
            f"after {fmt_load(load.get('after'))}; {r.get('seconds', 0):.0f} s"
        )
    return lines


def fmt_load(values: list[float] | None) -> str:
    return " ".join(f"{value:.2f}" for value in values) if values else "?"


def details(results: Results) -> list[str]:
    """The due lookup's plan and the profile's findings, after the tables."""
    lines: list[str] = []
    for vendor, title in COLUMNS:
        r = results.get(vendor)
        if r is None:
            continue
        scale = r.get("scale", {})
        if scale.get("explain"):
            lines += [
                "",
                f"{title}: EXPLAIN of WorkflowInstance.objects.due(now)",
                scale["explain"],
            ]
        if scale.get("explain_analyzed"):
            lines += [f"{title}: the same after ANALYZE", scale["explain_analyzed"]]
        profile = r.get("profile", {})
        if "layers" in profile:
            lines += [
                "",
                f"{title}: profile of {profile['steps']:,} sequential steps "
                f"({profile['ms_per_step']:.3f} ms/step under the profiler, "
                f"{profile['cpu_ms_per_step']:.3f} ms of it CPU; tree: {profile['file']})",
                "  share of wall time by layer (own time of each frame):",
            ]
            lines += [
                f"  {share * 100:5.1f} %  {layer}" for layer, share in profile["layers"].items()
            ]
            lines.append("  top functions by own time:")
            lines += [
                f"  {share * 100:5.1f} %  {where}" for where, share in profile["top_self_time"]
            ]
    return lines


def render(results: Results, *, smoke: bool) -> str:
    lines = figures_table(results).lines
    # The target blocks share their widths: their columns line up with each other too.
    blocks = target_blocks(results)
    label_width = max(block.widths()[0] for block in blocks)
    cell_width = max(block.widths()[1] for block in blocks)
    for block in blocks:
        lines += block.render(label_width, cell_width)
    lines.append("")
    if smoke:
        lines.append("Smoke sizes: the figures only show that every scenario ran.")
    lines += environment_lines(results)
    lines.append(
        "p99 is nearest-rank (with fewer than 100 samples it is the maximum); "
        "ratios compare figures measured side by side in the same run."
    )
    lines += details(results)
    return "\n".join(lines)
