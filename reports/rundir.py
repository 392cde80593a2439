"""Reading a run directory with pandas; tolerant of a run killed mid-write."""
from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd


class NotARunDirectory(Exception):
    pass


@dataclass
class RunData:
    dir: Path
    meta: dict
    metrics: pd.DataFrame
    events: pd.DataFrame
    score: dict | None  # None while the run has not finished
    attribution: dict | None = None  # attribution.json: the counterfactuals, if they were played

    @property
    def complete(self) -> bool:
        return self.meta.get("status") == "complete"


def _complete_lines(path: Path) -> str:
    """The file's text up to its last newline: a line being written when the run was
    killed is left out."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    cut = text.rfind("\n")
    return text[: cut + 1] if cut >= 0 else ""


def read_metrics(run_dir: Path) -> pd.DataFrame:
    text = _complete_lines(Path(run_dir) / "metrics.csv")
    if not text:
        return pd.DataFrame()
    return pd.read_csv(io.StringIO(text))


def read_events(run_dir: Path) -> pd.DataFrame:
    rows = [json.loads(line) for line in _complete_lines(Path(run_dir) / "events.jsonl").splitlines() if line.strip()]
    if not rows:
        return pd.DataFrame(columns=["tick", "clock", "agent", "event"])
    return pd.DataFrame(rows)


def load_run(run_dir) -> RunData:
    d = Path(run_dir)
    meta_path = d / "meta.json"
    if not meta_path.exists():
        raise NotARunDirectory(f"{d} is not a run directory (no meta.json)")
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    score_path = d / "score.json"
    score = json.loads(score_path.read_text(encoding="utf-8")) if score_path.exists() else None
    attribution_path = d / "attribution.json"
    attribution = json.loads(attribution_path.read_text(encoding="utf-8")) if attribution_path.exists() else None
    return RunData(dir=d, meta=meta, metrics=read_metrics(d), events=read_events(d), score=score,
                   attribution=attribution)
