"""The report of a live game day: the final ranking, the facilitator's controls, and a
section per team built from the team's run directory with the after-action report's
own analysis and templates."""
from __future__ import annotations

import json
from pathlib import Path

from .analysis import analyse
from .build import environment
from .files import write_atomic
from .rundir import RANKING, SESSION_INFO, SESSION_JOURNAL, TEAMS, load_run
from .timefmt import format_clock, parse_clock

CHARTS_PER_TEAM = ("loop", "backlog")  # the two that tell the story; each team's own report has them all

#: a facilitator's control (a journal record's control) -> what it says beyond its name, from the
#: record (the facilitator's page lists them so as it plays, the session report so after it)
CONTROL_TEXT = {
    "start": lambda d: "", "pause": lambda d: "",
    "resume": lambda d: "after the server's restart" if d.get("after_restart") else "",
    "speed": lambda d: f"{d['speed']:g}x",
    "inject": lambda d: d["fault"] + "".join(f" {k}={v}" for k, v in (d.get("params") or {}).items())
                        + f" into {', '.join(d['teams'])}",
    "message": lambda d: f"to {', '.join(d['teams'])}: {d['text'][:80]}", "end": lambda d: d["reason"],
    "hint": lambda d: f"to {', '.join(d['teams'])}: " + (d.get("name") or d["text"][:80]),
    "ranks": lambda d: "shown to the teams" if d["shown"] else "hidden from the teams",
    "restarted": lambda d: "the server restarted"}


def control_row(record: dict, clock: str) -> dict:
    """A facilitator's control (a journal record) as its history lists it, at ``clock``."""
    return {"clock": clock, "control": record["control"], "detail": CONTROL_TEXT[record["control"]](record)}


def session_controls(journal: list[dict], start_s: float, tick_s: float) -> list[dict]:
    """The facilitator's controls of a session's journal at the simulated clock, each said
    as ``CONTROL_TEXT`` says it (the teams' commands are in their own sections)."""
    return [control_row(j, format_clock(start_s + int(j["tick"]) * tick_s, with_seconds=True))
            for j in journal if j.get("control") in CONTROL_TEXT]


def speeds(info: dict, controls: list[dict]) -> str:
    """The session's speed as it went: its first, and each change at its clock."""
    changes = [f"{c['detail']} from {c['clock']}" for c in controls if c["control"] == "speed"]
    first = info.get("speed")
    first = f"{first:g}x" if isinstance(first, (int, float)) else str(first)
    return first + (f", then {', '.join(changes)}" if changes else "")


def read_session(session_dir: Path) -> tuple[dict, dict, list[dict]]:
    """(session.json, ranking.json, journal records) of a session directory."""
    info = json.loads((session_dir / SESSION_INFO).read_text(encoding="utf-8"))
    ranking_path = session_dir / RANKING
    # (no ranking yet, or one without its teams: none ranked, the one default of its teams)
    ranking = {"teams": [], **(json.loads(ranking_path.read_text(encoding="utf-8")) if ranking_path.is_file() else {})}
    journal = []
    journal_path = session_dir / SESSION_JOURNAL
    if journal_path.is_file():
        for line in journal_path.read_text(encoding="utf-8").splitlines():
            try:
                journal.append(json.loads(line))
            except ValueError:
                break  # a cut-short last line
    return info, ranking, journal


def write_session_report(session_dir, out: Path | None = None) -> list[Path]:
    """report/session.md and report/session.html (self-contained) in ``session_dir``."""
    from .charts import run_charts

    session_dir = Path(session_dir)
    info, ranking, journal = read_session(session_dir)
    out = Path(out) if out is not None else session_dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    teams = []
    order = [r["team"] for r in ranking["teams"]] or list(info.get("teams", []))
    for name in order:
        run = load_run(session_dir / TEAMS / name)
        a = analyse(run)
        charts = run_charts(run, a, CHARTS_PER_TEAM, formats=("svg",))
        teams.append({"name": name, "a": a, "report": f"../teams/{name}/report/report.md",
                      "charts": {k: c.svg for k, c in charts.items()}})
    controls = session_controls(journal, parse_clock(info["start_clock"]), float(info["tick_s"]))
    env = environment()
    said = dict(info=info, ranking=ranking["teams"], controls=controls, teams=teams, speeds=speeds(info, controls))
    md = env.get_template("session.md.j2").render(**said)
    html = env.get_template("session.html.j2").render(**said)
    write_atomic(out / "session.md", md)
    write_atomic(out / "session.html", html)
    return [out / "session.md", out / "session.html"]
