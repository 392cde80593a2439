"""Writing the after-action report of a run directory: Markdown with PNG charts beside
it, and/or one self-contained HTML file with the charts embedded."""
from __future__ import annotations

import base64
from pathlib import Path

import jinja2

from .analysis import Analysis, analyse
from .rundir import RunData, load_run

FORMATS = ("md", "html", "both")


def environment() -> jinja2.Environment:
    """The report templates (shared by the run, live-session and comparison reports)."""
    return jinja2.Environment(loader=jinja2.PackageLoader("reports", "templates"), autoescape=jinja2.select_autoescape(
        enabled_extensions=("html.j2",), default_for_string=False), trim_blocks=False, lstrip_blocks=False,
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True)


def data_uri(png: bytes) -> str:
    """A PNG inlined in HTML, so that the page is one self-contained file."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def write_report(run_dir: "Path | str | RunData", fmt: str = "both", out: Path | None = None) -> list[Path]:
    """Write the report of ``run_dir`` (or of a run already loaded) into ``out`` (default:
    ``run_dir/report``); returns the files written."""
    from .charts import run_charts  # matplotlib is imported only when a report is drawn

    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r}: expected one of {', '.join(FORMATS)}")
    run = run_dir if isinstance(run_dir, RunData) else load_run(run_dir)
    a: Analysis = analyse(run)
    out = Path(out) if out is not None else run.dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    charts = run_charts(run, a)
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
        uris = {name: data_uri(png) for name, png in charts.items()}
        (out / "report.html").write_text(env.get_template("run.html.j2").render(a=a, charts=uris), encoding="utf-8")
        written.append(out / "report.html")
    return written
