"""Run every benchmark: ``python -m bench`` (for now, the timer benchmark)."""

from .timers import main

if __name__ == "__main__":
    raise SystemExit(main())
