"""The ``gameday`` command line: the root group (``root.py``), the options commands share
(``options.py``), and a module per family of commands, each a thin face over the library."""
from .root import main
from . import one_run, playbooks, batch, live, openmetrics, gate  # noqa: F401  (each registers its commands on main)

__all__ = ["main"]
