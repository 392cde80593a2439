"""The after-action reports of a live game day, written as soon as it ends, in a thread of
their own: the server goes on answering meanwhile (the consoles and pages see the end at
once), and each team's page links its own report the moment it is written (``web``
serves it under that team's token). Each team's report first, in the ranking's order, then
the session report; one that cannot be written is said, and the others are written."""
from __future__ import annotations

import logging
import threading
from pathlib import Path

from orchestrator.errors import printable

log = logging.getLogger("gameday.serve")

NOT_YET, WRITING, READY, FAILED, NONE = "not yet", "writing", "ready", "failed", "none"


class Debriefs:
    """The reports of the session in ``session_dir``, for ``teams``: ``start()`` when it
    has ended; ``status(team)`` (None: the session report) says how each stands."""

    def __init__(self, session_dir: Path, teams: list[str]):
        self.dir, self.teams = Path(session_dir), list(teams)
        self.states: dict[str | None, dict] = {who: {"state": NOT_YET} for who in [*self.teams, None]}
        self.written: list[Path] = []  # every file written, in order
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        """Write the reports in a thread (once: a second call changes nothing)."""
        if self._thread is not None:
            return
        with self._lock:
            for state in self.states.values():
                state["state"] = WRITING
        self._thread = threading.Thread(target=self._write, name="gameday-reports", daemon=True)
        self._thread.start()

    def skip(self, why: str) -> None:
        """There is nothing to report (``why``): each page says so, rather than waiting."""
        with self._lock:
            for who in self.states:
                self.states[who] = {"state": NONE, "error": why}

    @property
    def busy(self) -> bool:
        """Whether reports are being written now."""
        return self._thread is not None and self._thread.is_alive()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the reports (if started); whether they are all written or failed."""
        if self._thread is not None:
            self._thread.join(timeout)
        return not self.busy

    def status(self, team: str | None) -> dict:
        """{"state": "not yet" | "writing" | "ready" | "failed" | "none", "path" (ready: the
        HTML file), "error" (failed, none: why)} of ``team``'s report; None: the session report's."""
        with self._lock:
            return dict(self.states.get(team, {"state": FAILED, "error": f"no team {team!r} in this session"}))

    def failures(self) -> dict[str | None, str]:
        """Why each report that failed did (None: the session report)."""
        with self._lock:
            return {who: s["error"] for who, s in self.states.items() if s["state"] == FAILED}

    def _set(self, who: str | None, **state) -> None:
        with self._lock:
            self.states[who] = state

    def _write(self) -> None:
        from reports import rundir
        from reports.build import write_report
        from reports.session import write_session_report

        for team in self.teams:
            self._one(team, lambda t=team: write_report(self.dir / rundir.TEAMS / t))
        self._one(None, lambda: write_session_report(self.dir))

    def _one(self, who: str | None, write) -> None:
        try:
            paths = write()
        except Exception as e:  # noqa: BLE001 - said, and the other reports are still written
            why = printable(f"{type(e).__name__}: {e}", 300)
            log.error("gameday serve: %s could not be written: %s",
                      f"team {who}'s report" if who else "the session report", why)
            self._set(who, state=FAILED, error=why)
            return
        html = next((p for p in paths if p.suffix == ".html"), None)
        with self._lock:
            self.written += paths
        self._set(who, state=READY, path=str(html) if html else None)
