"""The report of a live game day: the final ranking, the facilitator's controls, and a
section per team built from the team's run directory with the after-action report's
own analysis and templates."""
from __future__ import annotations

import base64
import json
from pathlib import Path

from .analysis import analyse
from .build import environment
from .rundir import load_run

CHARTS_PER_TEAM = ("bridge", "backlog")  # the two that tell the story; each team's own report has all five


def read_session(session_dir: Path) -> tuple[dict, dict, list[dict]]:
    """(session.json, ranking.json, journal records) of a session directory."""
    info = json.loads((session_dir / "session.json").read_text(encoding="utf-8"))
    ranking_path = session_dir / "ranking.json"
    ranking = json.loads(ranking_path.read_text(encoding="utf-8")) if ranking_path.is_file() else {"teams": []}
    journal = []
    journal_path = session_dir / "journal.jsonl"
    if journal_path.is_file():
        for line in journal_path.read_text(encoding="utf-8").splitlines():
            try:
                journal.append(json.loads(line))
            except ValueError:
                break  # a cut-short last line
    return info, ranking, journal


def write_session_report(session_dir, out: Path | None = None) -> list[Path]:
    """report/session.md and report/session.html (self-contained) in ``session_dir``."""
    from .charts import make_charts

    session_dir = Path(session_dir)
    info, ranking, journal = read_session(session_dir)
    out = Path(out) if out is not None else session_dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    teams = []
    order = [r["team"] for r in ranking.get("teams", [])] or list(info.get("teams", []))
    for name in order:
        run = load_run(session_dir / "teams" / name)
        a = analyse(run)
        scoring = a.scoring
        charts = make_charts(run.metrics, a, float(run.meta.get("tick_s", 1.0)), str(run.meta.get("start_clock", "start")),
                             (scoring.get("loop") or {}).get("devices", []), (scoring.get("loop") or {}).get("populations", []),
                             (scoring.get("backlog") or {}).get("populations", []))
        uris = {k: "data:image/png;base64," + base64.b64encode(v).decode("ascii") for k, v in charts.items()
                if k in CHARTS_PER_TEAM}
        teams.append({"name": name, "a": a, "charts": uris, "report": f"../teams/{name}/report/report.md"})
    controls = [j for j in journal if j.get("control") != "created"]
    env = environment()
    md = env.get_template("session.md.j2").render(info=info, ranking=ranking.get("teams", []), controls=controls, teams=teams)
    html = env.get_template("session.html.j2").render(info=info, ranking=ranking.get("teams", []), controls=controls,
                                                      teams=teams)
    (out / "session.md").write_text(md, encoding="utf-8")
    (out / "session.html").write_text(html, encoding="utf-8")
    return [out / "session.md", out / "session.html"]
