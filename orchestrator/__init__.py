"""Runs game days: playbook loading, world building, hosting, scoring, journal, CLI."""
from orchestrator.api import compare, run

__all__ = ["compare", "run"]
