"""Durations ("90s", "15m", "2h", "1h30m", or a number of seconds) and clock times
("07:30", "07:30:15") as used in playbooks and on the command line."""
from __future__ import annotations

import re

#: the text forms, also used by the JSON Schema (``orchestrator/playbook/json_schema.py``)
DURATION_PATTERN = r"^\s*(?:(\d+(?:\.\d+)?)h)?\s*(?:(\d+(?:\.\d+)?)m(?!s))?\s*(?:(\d+(?:\.\d+)?)s)?\s*(?:(\d+(?:\.\d+)?)ms)?\s*$"
CLOCK_PATTERN = r"^\s*(\d{1,2}):(\d{2})(?::(\d{2}))?\s*$"
_DURATION = re.compile(DURATION_PATTERN)
_CLOCK = re.compile(CLOCK_PATTERN)


def parse_duration(value) -> float:
    """Seconds, from a number or a string like ``1h30m``; raises ValueError."""
    if isinstance(value, bool):
        raise ValueError("a duration, not a boolean")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
        m = _DURATION.match(value)
        if m and any(m.groups()):
            h, mi, s, ms = (float(g) if g else 0.0 for g in m.groups())
            return h * 3600 + mi * 60 + s + ms / 1000
    raise ValueError(f"not a duration: {value!r}")


def parse_clock(value) -> float:
    """Seconds after midnight, from ``HH:MM`` or ``HH:MM:SS``; raises ValueError."""
    if isinstance(value, int) and not isinstance(value, bool):
        # YAML 1.1 reads unquoted 07:30 as the sexagesimal number 450 (minutes): accept it.
        return float(value * 60)
    if isinstance(value, str):
        m = _CLOCK.match(value)
        if m:
            h, mi, s = int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)
            if h < 48 and mi < 60 and s < 60:
                return float(h * 3600 + mi * 60 + s)
    raise ValueError(f"not a clock time: {value!r}")


def format_clock(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h:02d}:{m:02d}:{s:02d}" if s else f"{h:02d}:{m:02d}"


def format_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    if h:
        return f"{sign}{h}h{m:02d}m"
    if m:
        return f"{sign}{m}m{s:02d}s" if s else f"{sign}{m}m"
    return f"{sign}{s}s"
