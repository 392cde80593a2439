"""The documentation site builds without a warning, and its generated pages are what their
sources give now.

- ``mkdocs build --strict`` (mkdocs.yml: every link, anchor and image found, every page in the
  nav) into a temporary folder;
- docs/reference/cli.md, api.md and playbook.md equal what ``python -m orchestrator.docs``
  writes now, from the click commands, orchestrator/api.py's docstrings and the playbook format.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator import docs

ROOT = Path(__file__).resolve().parents[1]


def test_the_site_builds_strictly(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}"
    assert "WARNING" not in done.stdout, done.stdout
    for page in ("index.html", "tutorial/index.html", "reference/cli/index.html", "reference/api/index.html",
                 "reference/playbook/index.html", "how-to/prometheus/index.html"):
        assert (tmp_path / "site" / page).is_file(), page


@pytest.mark.parametrize("name", sorted(docs.pages()))
def test_the_generated_page_in_the_repository_is_current(name):
    committed = (ROOT / "docs" / "reference" / name).read_text(encoding="utf-8")
    assert committed == docs.pages()[name], \
        f"docs/reference/{name} is stale: regenerate it with `python -m orchestrator.docs`"


def test_the_cli_reference_names_every_command_and_option():
    """Nothing a user can type is missing from the page (hidden commands apart)."""
    import click

    from orchestrator.cli import main

    text = docs.cli_markdown()

    def walk(cmd: click.Command, path: str):
        assert f"\n## {path}\n" in text or f"\n### {path}\n" in text, path
        for p in cmd.params:
            if isinstance(p, click.Option) and not p.hidden:
                for opt in p.opts:
                    assert opt in text, (path, opt)
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                if not sub.hidden:
                    walk(sub, f"{path} {name}")

    walk(main, "gameday")
    assert "GAMEDAY_RUN_SEED" in text


def test_the_regenerating_command_writes_what_is_stale(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(docs, "REFERENCE_DIR", tmp_path)
    (tmp_path / "cli.md").write_text("old\n", encoding="utf-8")
    assert set(docs.stale()) == set(docs.pages())
    assert docs.main() == 0 and docs.stale() == []
    assert "docs/reference/cli.md: written" in capsys.readouterr().out
    docs.main()
    assert "docs/reference/cli.md: unchanged" in capsys.readouterr().out
