"""Writing the after-action report of a run directory: Markdown with PNG charts beside
it, and/or one self-contained HTML file with the charts embedded."""
from __future__ import annotations

import base64
from pathlib import Path

import jinja2

from .analysis import Analysis, analyse
from .files import inside, write_atomic
from .rundir import REPORT, RunData, check_run, load_run

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
    ``run_dir/report``, which must not lead out of the run directory: ``files.inside``);
    returns the files written, each whole or not at all. What cannot be reported raises
    ``rundir.BadRunDirectory`` (``check_run``, whose warnings the caller says)."""
    from .charts import run_charts  # matplotlib is imported only when a report is drawn

    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r}: expected one of {', '.join(FORMATS)}")
    run = run_dir if isinstance(run_dir, RunData) else load_run(run_dir)
    check_run(run)
    a: Analysis = analyse(run)

    def place(name: str) -> Path:
        """Where the report's file ``name`` goes: in its own folder of the run directory, or in ``out``."""
        return Path(out) / name if out is not None else inside(run.dir, f"{REPORT}/{name}")

    folder = place(".")
    folder.mkdir(parents=True, exist_ok=True)
    # (the Markdown report's charts are PNG files beside it; the HTML report's, SVG inline)
    charts = run_charts(run, a, formats=tuple(f for f, wanted in (("png", "md"), ("svg", "html"))
                                              if fmt in (wanted, "both")))
    env = environment()
    written = []
    if fmt in ("md", "both"):
        place("charts").mkdir(exist_ok=True)
        paths = {}
        for name, chart in charts.items():
            write_atomic(place(f"charts/{name}.png"), chart.png)
            written.append(folder / "charts" / f"{name}.png")
            paths[name] = f"charts/{name}.png"
        write_atomic(place("report.md"), env.get_template("run.md.j2").render(a=a, charts=paths))
        written.append(folder / "report.md")
    if fmt in ("html", "both"):
        svgs = {name: chart.svg for name, chart in charts.items()}
        write_atomic(place("report.html"), env.get_template("run.html.j2").render(a=a, charts=svgs))
        written.append(folder / "report.html")
    return written
