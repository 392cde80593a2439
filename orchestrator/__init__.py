"""Runs game days: playbook loading, world building, hosting, scoring, journal, CLI."""

__all__ = ["run", "compare", "fork", "check", "serve"]  # (in the order the API reference gives them)


def __getattr__(name: str):
    # ``run``, ``compare``, ``fork``, ``check`` and ``serve`` bring in reports (and pandas) on first use, not on import: the
    # processes hosting agents import this package too, and start a second sooner without them.
    if name in __all__:
        from orchestrator import api

        return getattr(api, name)
    raise AttributeError(f"module 'orchestrator' has no attribute {name!r}")
