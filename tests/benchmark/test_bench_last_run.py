"""``make bench`` prints the sequential figures beside the last saved run's of the same kind
(bench/__main__.attach_last_run and the row of bench/report.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.__main__ import attach_last_run
from bench.report import figures_table


def _sequential(steps_per_second: float) -> dict[str, Any]:
    run = {
        "steps_per_second": steps_per_second,
        "ms_per_step": 1000 / steps_per_second,
        "cpu_ms_per_step": 0.3,
        "raw_commits_per_second": 2_000,
        "ratio_to_raw": steps_per_second / 2_000,
    }
    return {"1000": run}


def _save(artifacts: Path, created: str, steps_per_second: float, *, smoke: bool) -> None:
    name = f"bench-{created}{'-smoke' if smoke else ''}.json"
    results = {"postgresql": {"sequential": _sequential(steps_per_second)}}
    (artifacts / name).write_text(json.dumps({"created": created, "results": results}))


def _row(results: dict[str, Any], label: str) -> str:
    (row,) = [line for line in figures_table(results).lines if label in line]
    return row


def test_the_newest_full_run_is_compared__not_an_older_one_nor_a_smoke_run(tmp_path):
    _save(tmp_path, "20261201-090000", 500, smoke=False)
    _save(tmp_path, "20261202-090000", 1_000, smoke=False)
    _save(tmp_path, "20261203-090000", 9_999, smoke=True)
    results = {"postgresql": {"sequential": _sequential(1_100)}}

    attach_last_run(results, tmp_path, smoke=False)

    assert _row(results, "N=1,000: the last run's steps/s").endswith("1,000/s -> +10%")
    assert _row(results, "the last run (").endswith("20261202-090000")


def test_a_smoke_run_is_compared_with_the_last_smoke_run(tmp_path):
    _save(tmp_path, "20261202-090000", 1_000, smoke=False)
    _save(tmp_path, "20261203-090000", 2_000, smoke=True)
    results = {"postgresql": {"sequential": _sequential(1_000)}}

    attach_last_run(results, tmp_path, smoke=True)

    assert _row(results, "N=1,000: the last run's steps/s").endswith("2,000/s -> -50%")


def test_without_an_earlier_run__the_row_says_so_with_a_dash(tmp_path):
    results = {"postgresql": {"sequential": _sequential(1_000)}}

    attach_last_run(results, tmp_path, smoke=False)

    assert _row(results, "N=1,000: the last run's steps/s").endswith("-")
