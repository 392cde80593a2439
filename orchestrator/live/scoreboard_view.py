"""The scoreboard as a plain-text table: ``gameday scoreboard`` and the final ranking
printed by ``gameday serve``. Takes the board of ``Session.scoreboard()`` (plus the
server's "consoles", absent from the board written at the end); every cell is text a
terminal may show (``protocol.for_terminal``)."""
from __future__ import annotations

from orchestrator.live.protocol import for_terminal, kept_pace

HEADINGS = ("rank", "team", "loop broken", "backlog drained", "impact so far", "first update", "actions", "consoles")
RIGHT = {0, 4, 6, 7}  # numeric columns, right-aligned
LAG_SHOWN_S = 1.0  # a lag below this is normal jitter, not worth the facilitator's attention


def render_board(board: dict) -> str:
    s = board.get("session") or {}
    consoles = board.get("consoles")
    rows = [HEADINGS] + [tuple(map(for_terminal, _row(t, consoles)))
                         for t in sorted(board.get("teams") or [], key=lambda t: t.get("rank", 0))]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADINGS))]
    lines = [_header(s)]
    for r in rows:
        cells = [c.rjust(w) if i in RIGHT else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))]
        lines.append("  ".join(cells).rstrip())
    if len(rows) == 1:
        lines.append("(no teams)")
    return "\n".join(lines)


def _header(s: dict) -> str:
    state = s.get("state", "?")
    speed = s.get("speed")
    parts = [f"{s.get('playbook', '?')}, seed {s.get('seed', '?')}",
             f"{s.get('clock', '?')} / {s.get('end_clock', '?')}",
             f"speed {speed:g}x" if isinstance(speed, (int, float)) else f"speed {speed or '?'}",
             state]
    lag, pace = s.get("lag_s") or 0, kept_pace(s)
    if pace is not None:
        parts.append(f"the worlds keep only {pace:.0f}x")
    elif lag > LAG_SHOWN_S:
        parts.append(f"lag {lag:.1f} s")
    title = "final ranking" if state == "ended" else "scoreboard"
    return for_terminal(f"{title}: " + ", ".join(parts))


def _row(t: dict, consoles: dict | None) -> tuple[str, ...]:
    impact = t.get("impact")
    return (str(t.get("rank", "")), str(t.get("team", "?")), t.get("loop") or "-", t.get("backlog") or "-",
            f"{impact:.1f}" if isinstance(impact, (int, float)) else "-",
            t.get("first_update") or "-", str(t.get("actions", 0)),
            "-" if consoles is None else str(consoles.get(t.get("team"), 0)))
