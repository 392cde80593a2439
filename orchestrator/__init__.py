"""Runs game days: playbook loading, world building, hosting, scoring, journal, CLI."""
from .api import run

__all__ = ["run"]
