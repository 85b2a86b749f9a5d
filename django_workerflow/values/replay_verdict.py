"""The verdict on one instance: whether the code now deployed replays its history."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ReplayVerdict:
    """Whether the code now deployed replays an instance's history: ``ok``, and when not,
    ``reason`` (``check-replay``'s messages for it; empty when ok)."""

    ok: bool
    reason: str = ""
