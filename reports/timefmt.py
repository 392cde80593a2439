"""Clock times and durations, the one place their text forms are written: as playbooks and
the command line write them ("07:30", "1h30m", "90s"), and as run directories, reports and
consoles show them. Here, so that ``reports`` and ``orchestrator`` (which may import
reports, never the other way) share it."""
from __future__ import annotations

import math
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
        # YAML 1.1 reads an unquoted 7:30 or 10:30 as the sexagesimal number 450 or 630 (minutes),
        # and 10:30:15 as 37815 (seconds): accept them. (A leading 0, 07:30, stays text.) H:MM reads
        # below 48 x 60, H:MM:SS (H at least 1) from 3600 on.
        if 0 <= value < 48 * 60:
            return float(value * 60)
        if 3600 <= value < 48 * 3600:
            return float(value)
    if isinstance(value, str):
        m = _CLOCK.match(value)
        if m:
            h, mi, s = int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)
            if h < 48 and mi < 60 and s < 60:
                return float(h * 3600 + mi * 60 + s)
    raise ValueError(f"not a clock time: {value!r}")


def format_clock(seconds: float, with_seconds: bool = False) -> str:
    """``07:30``, or ``07:30:15`` when there are seconds (always, ``with_seconds``)."""
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h:02d}:{m:02d}:{s:02d}" if s or with_seconds else f"{h:02d}:{m:02d}"


def format_duration(seconds: float) -> str:
    """``1h05m``, ``5m30s``, ``5m`` or ``30s``: the playbook's own duration form."""
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


def format_delta(seconds: float | None) -> str:
    """A signed difference in hours and minutes, ``+1h05m`` or ``-0h20m`` ("" for None)."""
    if seconds is None:
        return ""
    sign = "+" if seconds >= 0 else "-"
    s = int(round(abs(seconds)))
    return f"{sign}{s // 3600}h{(s % 3600) // 60:02d}m"


def format_minutes(seconds: float | None, decimals: int = 1) -> str:
    """``12.5 min``; "-" for no value."""
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return "-"
    return f"{seconds / 60:.{decimals}f} min"


def format_wait(seconds: float) -> str:
    """A short wait as people say it: ``35 s`` under a minute, else ``12 min``."""
    return f"{seconds:.0f} s" if seconds < 60 else format_minutes(seconds, 0)


def format_wait_exact(seconds: float) -> str:
    """A wait to the second: ``2 min 49 s``, ``3 min``, ``35 s`` (where ``format_wait``'s
    rounding would read ``3 min where it needed 3 min``)."""
    minutes, rest = divmod(int(round(seconds)), 60)
    return f"{rest} s" if not minutes else f"{minutes} min" + (f" {rest} s" if rest else "")


def format_minutes_difference(seconds: float) -> str:
    """``+12.5 min``; "undefined" when both sides are unbroken, ±inf when one is."""
    if math.isnan(seconds):
        return "undefined"
    if math.isinf(seconds):
        return "+inf" if seconds > 0 else "-inf"
    return f"{seconds / 60:+.1f} min"
