"""The benchmark's printed table (bench/report.py), from made-up results: every section
number once and in order, the starting scenario's figures, and target blocks whose rows
line up however long a label or a cell is."""

from __future__ import annotations

import re
from typing import Any

from bench.report import render
from bench.table import LABEL_MAX


def _results(vendor: str) -> dict[str, Any]:
    postgresql = vendor == "postgresql"
    start = {
        "starts": 500,
        "median": 0.00104 if postgresql else 0.00031,
        "p99": 0.0026 if postgresql else 0.0033,
        "raw_commit_seconds": 0.0002 if postgresql else 0.00002,
        "ratio_to_raw_commit": 5.2 if postgresql else 15.5,
        "statements": 1 if postgresql else 3,
        "statements_mean": 1.02 if postgresql else 3.0,
        "transactions": 1,
    }
    backlog = {"bells": 10_000, "drain_seconds": 5.0, "bells_per_second": 2_000, "inversions": 0}
    results: dict[str, Any] = {
        "environment": {
            "vendor": vendor,
            "server": vendor,
            "python": "3.11",
            "django": "5.2",
            "cpus": 2,
        },
        "load": {"before": [1.0, 1.0, 1.0], "after": [2.0, 2.0, 2.0]},
        "seconds": 60,
        "starts": {
            "start": start,
            "start_many": {"instances": 10_000, "seconds": 1, "instances_per_second": 10_000},
            "bells": backlog,
            "bells_django_q2_orm": {**backlog, "bells": 2_000},
        },
    }
    if postgresql:
        page = {"median": 0.0279, "max": 0.03, "queries": 7, "counting_queries": []}
        results["admin"] = {
            "instances": 1_111_164,
            "fill_seconds": 30,
            "change_list": page,
            "change_list_running": page,
            "change_page_steps": 10_000,
            "change_page": {**page, "median": 0.176},
            "overview": {**page, "median": 0.2413, "queries": 14},
        }
        results["wal"] = {
            "run_step": {"count": 2000, "wal_bytes_each": 1427, "server_cpu_ms_each": 0.195},
            "raw_commit": {"count": 2000, "wal_bytes_each": 188, "server_cpu_ms_each": None},
        }
        results["metrics"] = {
            "instances": 1_000_000,
            "processes": 50,
            "median": 0.0218,
            "p99": 0.024,
            "reflushed_median": 0.0281,
            "reflushed_p99": 0.032,
            "queries": [(0.008, "SELECT")],
        }
    else:
        results["admin"] = {"skipped": "measured on PostgreSQL"}
        results["wal"] = {"skipped": "PostgreSQL only"}
    latency = {"count": 100, "min": 0.01, "median": 0.0326, "p99": 0.101, "max": 0.2, "early": 0}
    results["tasks"] = {
        "workers": 4 if postgresql else 2,
        "ours": {
            "start_latency": latency,
            "tasks": 2_000,
            "tasks_per_second": 164.2,
            "cpu_ms_per_task": {"clients": 2.97, "server": 1.84}
            if postgresql
            else {"clients": 2.87, "server": None},
        },
        "django_tasks_db": {"skipped": "django-tasks-db is not installed"}
        if postgresql
        else {
            "start_latency": latency,
            "tasks": 2_000,
            "tasks_per_second": 211.0,
            "cpu_ms_per_task": {"clients": 1.5, "server": None},
        },
    }
    slowest = 15.5 if postgresql else 21.0
    results["recovery"] = {
        "settings": "defaults",
        "kill_to_retry": {
            "count": 5,
            "min": 11.7,
            "median": 13.0,
            "p99": slowest,
            "max": slowest,
            "early": 0,
        },
    }
    return results


def _table() -> list[str]:
    results = {vendor: _results(vendor) for vendor in ("sqlite", "postgresql")}
    return render(results, smoke=False).splitlines()


def test_report__kill_to_retry_passes_at_20_s_with_the_defaults_and_misses_above():
    lines = _table()
    (row,) = [line for line in lines if line.startswith("  kill -> next attempt")]

    assert "13.0 / 21.0 s MISS" in row  # SQLite: the slowest kill took 21 s
    assert row.endswith("13.0 / 15.5 s PASS")  # PostgreSQL


def test_report__the_cost_targets_compare_a_step_and_a_start_with_the_raw_commit():
    results = {vendor: _results(vendor) for vendor in ("sqlite", "postgresql")}
    postgresql = results["postgresql"]
    postgresql["wal"]["raw_commit"]["server_cpu_ms_each"] = 0.1
    postgresql["starts"]["start_many"].update(
        plain_insert_per_second=25_000, ratio_to_plain_insert=0.4
    )
    lines = render(results, smoke=False).splitlines()

    def row(label: str) -> str:
        (found,) = [line for line in lines if line.startswith(f"  {label}")]
        return found

    assert row("run step WAL").endswith("1,427 / 188 B = x7.59 MISS")
    assert row("run step server CPU").endswith("0.195 / 0.100 ms = x1.95 PASS")
    assert row("start_many() of 10,000: >= 0.5 x plain")
    (many,) = [line for line in lines if "10,000 / 25,000/s" in line]
    assert many.endswith("= x0.40 MISS")
    assert "skipped: PostgreSQL only" in row("run step WAL")  # SQLite


def test_report__the_django_tasks_targets_pass_or_miss_on_each_database():
    results = {vendor: _results(vendor) for vendor in ("sqlite", "postgresql")}
    postgresql = results["postgresql"]["tasks"]
    postgresql["ours"]["start_latency"] = {**postgresql["ours"]["start_latency"], "median": 0.0594}
    postgresql["ours"]["tasks_per_second"] = 130.4
    postgresql["django_tasks_db"] = {**results["sqlite"]["tasks"]["django_tasks_db"]}
    postgresql["django_tasks_db"]["tasks_per_second"] = 125.0
    lines = render(results, smoke=False).splitlines()
    (started,) = [line for line in lines if line.startswith("  django.tasks enqueue to started")]
    (drained,) = [line for line in lines if line.startswith("  django.tasks drained")]

    assert "32.6 ms PASS" in started  # SQLite: under 50 ms
    assert started.endswith("59.4 ms MISS")  # PostgreSQL
    assert "164 vs 211 tasks/s MISS" in drained  # SQLite: below django-tasks-db
    assert drained.endswith("130 vs 125 tasks/s PASS")  # PostgreSQL


def test_report__the_throughput_target_has_no_verdict_without_django_tasks_db():
    (drained,) = [line for line in _table() if line.startswith("  django.tasks drained")]

    assert drained.endswith("164 tasks/s (no django-tasks-db)")  # PostgreSQL: skipped


def test_report__prints_the_overview_beside_the_change_list_and_its_target():
    lines = _table()
    section = lines.index(next(line for line in lines if line.startswith("12. Admin")))
    admin = lines[section + 1 : section + 6]
    assert admin[0].startswith("  instance list")
    assert admin[0].endswith("27.9 ms (7 queries)")
    assert admin[3].startswith("  overview page")
    assert admin[3].endswith("241 ms (14 queries)")
    (row,) = [line for line in lines if line.startswith("  admin overview page at 1,000,000")]
    assert row.endswith("241 ms (14 queries) at 1,111,164 PASS")


def test_report__overview_over_300_ms__misses_its_target():
    results = {vendor: _results(vendor) for vendor in ("sqlite", "postgresql")}
    results["postgresql"]["admin"]["overview"]["median"] = 0.4
    lines = render(results, smoke=False).splitlines()
    (row,) = [line for line in lines if line.startswith("  admin overview page at 1,000,000")]
    assert row.endswith("400 ms (14 queries) at 1,111,164 MISS")


def _scrape_row(results: dict[str, Any]) -> str:
    lines = render(results, smoke=False).splitlines()
    (row,) = [line for line in lines if line.startswith("  scrape at 1,000,000")]
    return row


def test_report__the_scrape_target_holds_only_when_both_medians_do():
    results = {vendor: _results(vendor) for vendor in ("sqlite", "postgresql")}
    assert _scrape_row(results).endswith("21.8 / 28.1 ms at 1,000,000 PASS")

    # A fleet of live workers flushes between two scrapes: that scrape counts too.
    results["postgresql"]["metrics"]["reflushed_median"] = 0.0631
    assert _scrape_row(results).endswith("21.8 / 63.1 ms at 1,000,000 MISS")


def test_report__numbers_every_section_once_in_order():
    numbers = [int(m.group(1)) for line in _table() if (m := re.match(r"(\d+)\. ", line))]

    assert numbers == list(range(1, len(numbers) + 1))
    assert len(numbers) == 15


def test_report__prints_the_django_tasks_figures_beside_django_tasks_db():
    lines = _table()
    section = lines.index(next(line for line in lines if line.startswith("14. django.tasks")))
    tasks = lines[section + 1 : section + 8]

    assert tasks[0].split()[-2:] == ["2", "4"]  # workers per database
    assert "32.6 / 101 ms" in tasks[1]
    assert "164 tasks/s" in tasks[2]
    # CPU per task: the workers' (SQLite runs inside them), + the server's on PostgreSQL
    assert tasks[3].startswith("    CPU per task drained")
    assert tasks[3].split()[-6:] == ["2.87", "ms", "2.97", "+", "1.84", "ms"]
    assert tasks[5].split()[-3:] == ["211", "tasks/s", "skipped"]
    assert tasks[6].split()[-3:] == ["1.50", "ms", "skipped"]


def test_report__prints_the_starting_figures():
    lines = _table()
    section = lines.index(next(line for line in lines if line.startswith("11. Starting")))
    starting = "\n".join(lines[section : section + 8])

    assert "0.3 / 3.3 ms" in starting  # SQLite: median / p99
    assert "1.0 / 2.6 ms" in starting  # PostgreSQL
    assert "0.200 ms -> x5.20" in starting  # raw commit and the ratio to it
    assert "3 / 1" in starting  # statements / transactions
    assert "1.02" in starting  # statements per start, id block draws included


def test_report__the_rows_of_every_target_block_line_up():
    lines = _table()
    first = lines.index(next(line for line in lines if line.startswith("Targets: ")))
    last = next(i for i, line in enumerate(lines) if i > first and line.startswith("SQLite"))
    block = [line for line in lines[first:last] if line and not line.startswith("-")]
    # Cells stand two spaces at least from what precedes them; a wrapped label's first
    # lines carry none.
    with_cells = [line for line in block if re.search(r"\S {2,}\S", line)]
    label_only = [line for line in block if line not in with_cells]

    assert len(with_cells) >= 20
    assert len({len(line) for line in with_cells}) == 1, with_cells
    assert all(len(line) <= LABEL_MAX for line in label_only), label_only
    # Each cell is right-aligned in its own column: the PostgreSQL cells end the rows, the
    # SQLite cells end at one column too.
    sqlite_ends = set()
    for line in with_cells:
        sqlite_cell = re.search(r"(\S+(?: \S+)*)\s{2,}\S+(?: \S+)*$", line)
        assert sqlite_cell, line
        sqlite_ends.add(sqlite_cell.end(1))
    assert len(sqlite_ends) == 1, sqlite_ends


def test_report__the_wake_up_targets_pass_or_miss_on_postgresql_only():
    from bench import targets

    latency = {"median": 0.008, "p99": 0.020, "early": 0}
    results = {
        "environment": {"vendor": "postgresql"},
        "clusters": {
            "latency": {
                "event_to_resume": {**latency, "median": 0.0135},
                "start_to_first_step": latency,
                "timer_lateness": {**latency, "p99": 0.150},
            },
            "idle": {"1": {"per_cluster_per_second": 3.42}, "4": {"per_cluster_per_second": 0.9}},
        },
    }

    assert targets.event_wake_up(results) == "13.5 / 20.0 ms MISS"
    assert targets.start_wake_up(results) == "8.0 ms PASS"
    assert targets.timer_lateness(results) == "8.0 / 150 ms, 0 early MISS"
    assert targets.idle_transactions("1")(results) == "3.42/s MISS"
    assert targets.idle_transactions("4")(results) == "0.90/s PASS"
    sqlite = {**results, "environment": {"vendor": "sqlite"}}
    assert targets.idle_transactions("1")(sqlite) == "- (PostgreSQL)"


def _timeouts(untimed: float, disabled: tuple[float, float, float]) -> dict[str, Any]:
    """Scenario 41's results: ms/step medians, and the timer-free variant's (p25, median,
    p75)."""
    low, median, high = disabled
    return {
        "steps": 400,
        "rounds": 25,
        "ms_per_step": {
            "no_timeout": {"median": untimed, "p25": untimed, "p75": untimed},
            "timer_disabled": {"median": median, "p25": low, "p75": high},
            "timeout_60": {"median": untimed + 0.01, "p25": untimed, "p75": untimed + 0.02},
        },
        "untimed_to_disabled": {"median": untimed / median, "p25": 0.9, "p75": 1.1},
        "timer_us_per_step": {"median": 10.0, "p25": -5.0, "p75": 25.0},
    }


def test_report__a_step_without_a_timeout_passes_within_the_timer_free_spread_or_3_percent():
    results = {vendor: _results(vendor) for vendor in ("sqlite", "postgresql")}
    results["sqlite"]["timeouts"] = _timeouts(0.150, (0.110, 0.135, 0.160))  # in its quartiles
    results["postgresql"]["timeouts"] = _timeouts(0.680, (0.660, 0.665, 0.670))  # +2.3 %

    def verdicts() -> list[str]:
        lines = render(results, smoke=False).splitlines()
        (row,) = [line for line in lines if line.lstrip().startswith("code without the timer")]
        return re.split(r" {2,}", row.strip())[1:]

    assert verdicts() == ["0.150 / 0.135 ms = x1.111 PASS", "0.680 / 0.665 ms = x1.023 PASS"]
    results["postgresql"]["timeouts"] = _timeouts(0.700, (0.660, 0.665, 0.670))  # +5.3 %
    assert verdicts()[1] == "0.700 / 0.665 ms = x1.053 MISS"
    table = render(results, smoke=False)
    assert "0.150 ms (0.150-0.150)" in table
    assert "+10.0 µs (-5.0 to +25.0)" in table


def _peers(vendor: str, *, sequential: float, fleet: float, tasks: float) -> dict[str, Any]:
    """One database's results with the side-by-side figures: ours over the peer's."""
    results = _results(vendor)
    results["peer"] = {
        "sequential": {"ratio": sequential},
        "fleet": {"steps_per_second": 100.0},
    }
    results["clusters"] = {"fleet": {"1": {"steps_per_second": 100.0 * fleet}}}
    results["tasks"]["ours"]["tasks_per_second"] = 200.0 * tasks
    results["tasks"]["django_tasks_db"] = {
        "start_latency": results["tasks"]["ours"]["start_latency"],
        "tasks": 2_000,
        "tasks_per_second": 200.0,
    }
    return results


def _target_cells(results: dict[str, Any], label: str) -> list[str]:
    """The cells of the target row whose label starts with ``label`` (on its last line when
    the label wraps)."""
    lines = render(results, smoke=False).splitlines()
    (first,) = [i for i, line in enumerate(lines) if line.startswith(f"  {label}")]
    row = next(line for line in lines[first:] if re.search(r"\S {2,}\S", line))
    return re.split(r" {2,}", row.strip())[1:]


def test_report__the_peer_targets_hold_their_own_bound_on_each_database():
    # SQLite: sequential 8 x DBOS, fleet 3.5 x; PostgreSQL: sequential 6 x, fleet 6 x.
    results = {
        "sqlite": _peers("sqlite", sequential=8.0, fleet=3.4, tasks=1.5),
        "postgresql": _peers("postgresql", sequential=7.9, fleet=6.0, tasks=1.49),
    }

    assert _target_cells(results, "sequential steps/s >= 6 x DBOS") == [
        "x8.00 (>= 8) PASS",
        "x7.90 (>= 6) PASS",
    ]
    assert _target_cells(results, "fleet of 500 x 10 steps") == [
        "340 / 100 steps/s = x3.40 (>= 3.5) MISS",
        "600 / 100 steps/s = x6.00 (>= 6) PASS",
    ]
    assert _target_cells(results, "django.tasks, 2,000 drained by 1 cluster") == [
        "x1.50 PASS",
        "x1.49 MISS",
    ]
    results["sqlite"]["peer"]["sequential"]["ratio"] = 7.9
    assert _target_cells(results, "sequential steps/s >= 6 x DBOS")[0] == "x7.90 (>= 8) MISS"


def test_report__start_holds_2_5_raw_commits_and_start_many_half_a_plain_insert():
    results = {vendor: _results(vendor) for vendor in ("sqlite", "postgresql")}
    results["postgresql"]["starts"]["start"]["ratio_to_raw_commit"] = 2.5
    for vendor, ratio in (("sqlite", 0.49), ("postgresql", 0.5)):
        results[vendor]["starts"]["start_many"].update(
            plain_insert_per_second=10_000 / ratio, ratio_to_plain_insert=ratio
        )

    assert _target_cells(results, "start(): median <= 2.5 x raw commit (PG)") == [
        "0.3 ms = x15.50 (no target)",
        "1.0 ms = x2.50 PASS",
    ]
    assert _target_cells(results, "start(): median <= 2 x raw commit (PG)")[1].endswith("MISS")
    lines = render(results, smoke=False).splitlines()
    (many,) = [line for line in lines if "10,000 / 20,408/s" in line]
    assert re.split(r" {2,}", many.strip())[-2:] == [
        "10,000 / 20,408/s = x0.49 MISS",
        "10,000 / 20,000/s = x0.50 PASS",
    ]


def test_report__names_its_target_blocks_by_promise_not_by_issue():
    headers = [line for line in _table() if line.startswith("Targets")]

    assert len(headers) == 8
    assert not [header for header in headers if re.search(r"issue|\(\d", header)], headers
