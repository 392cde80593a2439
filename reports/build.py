"""Writing the after-action report of a run directory: Markdown with PNG charts beside
it, and/or one self-contained HTML file with the charts embedded."""
from __future__ import annotations

import base64
from pathlib import Path

import jinja2

from .analysis import Analysis, analyse
from .rundir import load_run

FORMATS = ("md", "html", "both")


def environment() -> jinja2.Environment:
    """The report templates (shared by the run, live-session and comparison reports)."""
    return jinja2.Environment(loader=jinja2.PackageLoader("reports", "templates"), autoescape=jinja2.select_autoescape(
        enabled_extensions=("html.j2",), default_for_string=False), trim_blocks=False, lstrip_blocks=False,
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True)


def write_report(run_dir, fmt: str = "both", out: Path | None = None) -> list[Path]:
    """Write the report of ``run_dir`` into ``out`` (default: ``run_dir/report``); returns
    the files written."""
    from .charts import make_charts  # matplotlib is imported only when a report is drawn

    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r}: expected one of {', '.join(FORMATS)}")
    run = load_run(run_dir)
    a: Analysis = analyse(run)
    out = Path(out) if out is not None else run.dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    scoring = a.scoring
    charts = make_charts(run.metrics, a, float(run.meta.get("tick_s", 1.0)), str(run.meta.get("start_clock", "start")),
                         (scoring.get("loop") or {}).get("devices", []), (scoring.get("loop") or {}).get("populations", []),
                         (scoring.get("backlog") or {}).get("populations", []))
    env = environment()
    written = []
    if fmt in ("md", "both"):
        (out / "charts").mkdir(exist_ok=True)
        paths = {}
        for name, png in charts.items():
            (out / "charts" / f"{name}.png").write_bytes(png)
            written.append(out / "charts" / f"{name}.png")
            paths[name] = f"charts/{name}.png"
        (out / "report.md").write_text(env.get_template("run.md.j2").render(a=a, charts=paths), encoding="utf-8")
        written.append(out / "report.md")
    if fmt in ("html", "both"):
        uris = {name: "data:image/png;base64," + base64.b64encode(png).decode("ascii") for name, png in charts.items()}
        (out / "report.html").write_text(env.get_template("run.html.j2").render(a=a, charts=uris), encoding="utf-8")
        written.append(out / "report.html")
    return written
