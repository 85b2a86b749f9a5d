"""Telling a statement that writes from one that reads."""

from __future__ import annotations

import re

WRITE = re.compile(r"^\s*(INSERT|UPDATE|DELETE|REPLACE|CREATE|DROP|ALTER)\b", re.IGNORECASE)
