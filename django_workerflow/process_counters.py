"""The counters and histograms this process observed, kept in memory.

The code that observes something counts it here (a step attempt started or finished, a
tick's duration, a wake's lag): a dict increment under a lock no other thread contends
for, so the hot path pays nothing measurable. Each process flushes its cumulative totals
to a database row of its own (``ProcessMetrics``, written by
:mod:`django_workerflow.store.flushed_totals`) at most every ``WORKERFLOW_SWEEP_SECONDS``,
off the hot path; a scrape sums every process's row, the scraping process's own unflushed
totals standing in for its row (:mod:`django_workerflow.metrics`).

A forked child starts from zero under a process id of its own (``os.register_at_fork``),
so a worker never reports its parent's counts as its own.

This module is a leaf, at the bottom of the layers: it imports nothing of the package.
"""

from __future__ import annotations

import bisect
import math
import os
import socket
import threading
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

__all__ = [
    "ATTEMPT_DURATION_BUCKETS",
    "EMPTY",
    "LAG_BUCKETS",
    "PROCESS_COUNTERS",
    "TICK_DURATION_BUCKETS",
    "Flat",
    "ProcessCounters",
    "Series",
    "Sums",
    "difference",
    "flattened",
    "summed",
    "summed_flat",
]

#: The counters, by the name of their family (without ``_total``).
ATTEMPTS_STARTED = "workerflow_step_attempts_started"
ATTEMPTS_FINISHED = "workerflow_step_attempts_finished"
#: The histograms.
ATTEMPT_DURATION = "workerflow_step_attempt_duration_seconds"
TICK_DURATION = "workerflow_tick_duration_seconds"
WAKE_LAG = "workerflow_wake_lag_seconds"

# Upper bounds, in seconds. An attempt's: prometheus-client's defaults.
ATTEMPT_DURATION_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
)  # fmt: skip
# A tick of short steps takes milliseconds; the tick budget (WORKERFLOW_TICK_BUDGET) caps
# a busy one at tens of seconds.
TICK_DURATION_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip
# A wake's lag: a precise bell is a few tens of ms late, a lost one minutes.
LAG_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)

#: Each histogram's bounds.
BUCKETS = {
    ATTEMPT_DURATION: ATTEMPT_DURATION_BUCKETS,
    TICK_DURATION: TICK_DURATION_BUCKETS,
    WAKE_LAG: LAG_BUCKETS,
}

Labels = tuple[str, ...]
#: A totals document, as :meth:`ProcessCounters.totals` gives it and a row stores it.
Totals = dict[str, Any]


class ProcessCounters:
    """One process's cumulative counters and histograms, and its identity.

    A histogram's value per label set is a list: the observations in each bucket (not
    cumulative; the last one past the largest bound), then their count, then their sum.
    The counts are ints, as a counter's value is: a flushed document then holds them as
    JSON integers, which a scrape decodes in well under half the time of floats (``0.0``)
    and which every release reads alike.
    """

    def __init__(self) -> None:
        self.start_afresh()

    def start_afresh(self) -> None:
        """Zero every total under a new process id (a forked child's first act)."""
        #: This process's id, the key of its row; new in each process.
        self.process = uuid.uuid4()
        self.pid = os.getpid()
        self.host = socket.gethostname()
        self.counters: dict[str, dict[Labels, float]] = {
            ATTEMPTS_STARTED: {},
            ATTEMPTS_FINISHED: {},
        }
        self.histograms: dict[str, dict[Labels, list[float]]] = {name: {} for name in BUCKETS}
        #: Observations since the last flush (0: the row is current).
        self.unflushed = 0
        #: When the last flush wrote the row (``time.monotonic()``; None: never).
        self.flushed_at: float | None = None
        #: The totals the last flush wrote (this process's, before subtracting ``retired``).
        self.last_flushed: Totals = EMPTY
        #: The part of the totals already merged into the retired row (see
        #: :mod:`django_workerflow.store.flushed_totals`): the row holds the rest.
        self.retired: Totals = EMPTY
        self._lock = threading.Lock()  # a lock a parent held while forking stays held

    # Observing -------------------------------------------------------------------------

    def attempt_started(self, definition: str, step_type: str) -> None:
        """A step attempt started."""
        counts = self.counters[ATTEMPTS_STARTED]
        key = (definition, step_type)
        with self._lock:
            counts[key] = counts.get(key, 0) + 1
            self.unflushed += 1

    def attempt_finished(
        self, definition: str, step_type: str, outcome: str, seconds: float | None
    ) -> None:
        """A step attempt finished with ``outcome``, its callback having run ``seconds``
        (None: not measured here, as for an interrupted attempt)."""
        counts = self.counters[ATTEMPTS_FINISHED]
        key = (definition, step_type, outcome)
        with self._lock:
            counts[key] = counts.get(key, 0) + 1
            if seconds is not None:
                self._observe(ATTEMPT_DURATION, (definition,), seconds)
            self.unflushed += 1

    def tick_finished(self, definition: str, seconds: float) -> None:
        """A tick of an instance of ``definition`` took ``seconds``, claim to settle."""
        with self._lock:
            self._observe(TICK_DURATION, (definition,), seconds)
            self.unflushed += 1

    def woke(self, definition: str, cause: str, seconds: float) -> None:
        """A tick started ``seconds`` after the due time it was woken for."""
        with self._lock:
            self._observe(WAKE_LAG, (definition, cause), max(0.0, seconds))
            self.unflushed += 1

    def _observe(self, name: str, labels: Labels, value: float) -> None:
        series = self.histograms[name]
        bounds = BUCKETS[name]
        counts = series.get(labels)
        if counts is None:
            # The buckets and the count as ints, the sum as a float (see the class).
            counts = series[labels] = [0] * (len(bounds) + 2) + [0.0]
        counts[bisect.bisect_left(bounds, value)] += 1
        counts[-2] += 1
        counts[-1] += value

    # Reading ---------------------------------------------------------------------------

    def totals(self) -> dict[str, Any]:
        """A JSON-ready copy of every total: ``{"counters": {name: [[labels, value], ...]},
        "histograms": {name: [[labels, [buckets..., count, sum]], ...]}}``."""
        with self._lock:
            return {
                "counters": {
                    name: [[list(labels), value] for labels, value in series.items()]
                    for name, series in self.counters.items()
                },
                "histograms": {
                    name: [[list(labels), list(values)] for labels, values in series.items()]
                    for name, series in self.histograms.items()
                },
            }

    def flushed(self, at: float, observed: int, totals: Totals) -> None:
        """The row now holds ``totals`` (less :attr:`retired`), read when ``observed``
        observations were unflushed."""
        with self._lock:
            self.unflushed -= observed
            self.flushed_at = at
            self.last_flushed = totals


#: The totals of a process that observed nothing.
EMPTY: Totals = {"counters": {}, "histograms": {}}


class Sums:
    """Totals documents added (and subtracted) series by series: counters by name and
    labels, histograms by name and labels, their buckets, count and sum added one by one.
    A histogram flushed with other buckets (by another release) is left out. Integer
    counts stay integers (see :class:`ProcessCounters`)."""

    def __init__(self) -> None:
        self.counters: dict[str, dict[Labels, float]] = {}
        self.histograms: dict[str, dict[Labels, list[float]]] = {}

    def add(self, totals: Totals, sign: int = 1) -> Sums:
        for name, series in totals.get("counters", {}).items():
            summed = self.counters.setdefault(name, {})
            for labels, value in series:
                key = tuple(labels)
                summed[key] = summed.get(key, 0) + sign * value
        for name, series in totals.get("histograms", {}).items():
            bounds = BUCKETS.get(name)
            summed_histogram = self.histograms.setdefault(name, {})
            for labels, values in series:
                if bounds is None or len(values) != len(bounds) + 3:
                    continue
                current = summed_histogram.setdefault(tuple(labels), [0] * len(values))
                for index, value in enumerate(values):
                    current[index] += sign * value
        return self

    def totals(self) -> Totals:
        """The sums as a totals document."""
        return {
            "counters": {
                name: [[list(labels), value] for labels, value in series.items()]
                for name, series in self.counters.items()
            },
            "histograms": {
                name: [[list(labels), values] for labels, values in series.items()]
                for name, series in self.histograms.items()
            },
        }


@dataclass(frozen=True, eq=False)
class Series:
    """Totals summed (:func:`summed`): each counter's value and each histogram's buckets,
    count and sum, by name and labels. Read-only: scrapes share one (and key their
    rendering on its identity, hence ``eq=False``)."""

    counters: dict[str, dict[Labels, float]]
    histograms: dict[str, dict[Labels, tuple[float, ...]]]


#: A series: its family's name and its labels.
Key = tuple[str, Labels]


class Flat(NamedTuple):
    """A totals document as :func:`summed_flat` reads it (:func:`flattened`): its counters'
    keys and values, and its histograms' keys and their buckets, count and sum one series
    after the other (each histogram's width is its bounds' and three).

    What a scrape keeps of a row between scrapes. Tuples one level deep, of numbers and of
    keys shared by every row: the garbage collector stops tracking them at the first
    collection they survive, where a decoded document's lists (about 160 a row) stay
    tracked; a fleet's worth of them kept anew at each scrape brought on the full
    collections (30 ms over a Django process's heap) that made a scrape's p99."""

    counter_keys: tuple[Key, ...]
    counter_values: tuple[float, ...]
    histogram_keys: tuple[Key, ...]
    histogram_values: tuple[float, ...]


#: Each series key seen, so that every row kept holds the same one (see :class:`Flat`).
_KEYS: dict[Key, Key] = {}
#: Labels are bounded; past this many keys (a bug elsewhere), new ones are not kept.
_KEYS_KEPT = 10_000


def _key(name: str, labels: list[str]) -> Key:
    key = (name, tuple(labels))
    if len(_KEYS) >= _KEYS_KEPT:
        return _KEYS.get(key, key)
    return _KEYS.setdefault(key, key)


def flattened(totals: Totals) -> Flat:
    """``totals`` as a :class:`Flat`, without a histogram flushed with other buckets (by
    another release)."""
    counter_keys: list[Key] = []
    counter_values: list[float] = []
    for name, series in totals.get("counters", {}).items():
        for labels, value in series:
            counter_keys.append(_key(name, labels))
            counter_values.append(value)
    histogram_keys: list[Key] = []
    histogram_values: list[float] = []
    for name, series in totals.get("histograms", {}).items():
        bounds = BUCKETS.get(name)
        if bounds is None:
            continue
        width = len(bounds) + 3
        for labels, values in series:
            if len(values) == width:
                histogram_keys.append(_key(name, labels))
                histogram_values.extend(values)
    return Flat(
        tuple(counter_keys), tuple(counter_values), tuple(histogram_keys), tuple(histogram_values)
    )


def summed(documents: Iterable[Totals]) -> Series:
    """Totals documents added series by series, as :func:`summed_flat` adds them."""
    return summed_flat(map(flattened, documents))


def summed_flat(documents: Iterable[Flat]) -> Series:
    """Documents added series by series, each value with ``math.fsum``: exactly rounded, so
    the result does not depend on the documents' order and a sum never goes down while no
    document's does (a float sum added in a changing order can, by a rounding step, and
    Prometheus reads a counter that went down as a reset)."""
    counted: dict[Key, list[float]] = {}
    binned: dict[Key, list[tuple[float, ...]]] = {}
    for document in documents:
        for key, value in zip(document.counter_keys, document.counter_values, strict=True):
            held = counted.get(key)
            if held is None:
                counted[key] = [value]
            else:
                held.append(value)
        values = document.histogram_values
        start = 0
        for key in document.histogram_keys:
            end = start + len(BUCKETS[key[0]]) + 3
            rows = binned.get(key)
            if rows is None:
                binned[key] = [values[start:end]]
            else:
                rows.append(values[start:end])
            start = end
    counters_summed: dict[str, dict[Labels, float]] = {}
    for (name, labels), added in counted.items():
        counters_summed.setdefault(name, {})[labels] = math.fsum(added)
    histograms_summed: dict[str, dict[Labels, tuple[float, ...]]] = {}
    for (name, labels), rows in binned.items():
        histograms_summed.setdefault(name, {})[labels] = tuple(
            map(math.fsum, zip(*rows, strict=True))
        )
    return Series(counters_summed, histograms_summed)


def plus(series: Series, totals: Totals) -> Series:
    """``series`` with one more document added, without summing the others again. Each
    value is the correctly rounded sum of the two (one float addition): it never goes down
    while neither does, as :func:`summed`'s."""
    counters = {name: dict(values) for name, values in series.counters.items()}
    histograms = {name: dict(values) for name, values in series.histograms.items()}
    for name, pairs in totals.get("counters", {}).items():
        adding = counters.setdefault(name, {})
        for labels, value in pairs:
            key = tuple(labels)
            adding[key] = adding.get(key, 0.0) + value
    for name, labels, values in _histograms(totals):
        stacking = histograms.setdefault(name, {})
        held = stacking.get(labels)
        stacking[labels] = (
            tuple(values)
            if held is None
            else tuple(a + b for a, b in zip(held, values, strict=True))
        )
    return Series(counters, histograms)


def _histograms(totals: Totals) -> Iterator[tuple[str, Labels, list[float]]]:
    """Each histogram series of ``totals`` as (name, labels, buckets + count + sum), but
    one flushed with other buckets (by another release), which is left out."""
    for name, series in totals.get("histograms", {}).items():
        bounds = BUCKETS.get(name)
        if bounds is None:
            continue
        for labels, values in series:
            if len(values) == len(bounds) + 3:
                yield name, tuple(labels), values


def difference(totals: Totals, less: Totals) -> Totals:
    """``totals`` less ``less``, series by series."""
    if less is EMPTY:
        return totals
    return Sums().add(totals).add(less, -1).totals()


#: This process's process_counters.
PROCESS_COUNTERS = ProcessCounters()

# A forked worker (django-q2's) starts from zero, as a process of its own.
os.register_at_fork(after_in_child=PROCESS_COUNTERS.start_afresh)
