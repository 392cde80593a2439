"""The long in-process runs that tests share, and their player.

When a test run has tests that use them (``run_2021`` in tests/conftest.py), a player
process (``python -m tests.long_runs DIR``, at the lowest priority, one per test run
whatever the number of pytest-xdist workers) plays them one after the other from the
start, on what the tests leave idle. Each run is claimed (a file created exclusively) by
whichever process gets to it first: a test never waits for a run no process has begun, it
plays it itself.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

RUNBOOKS = Path(__file__).parent / "playbooks" / "runbooks"

#: The long in-process runs that tests share, by key: what each one plays (orchestrator.run's
#: arguments; of us-east-1-2021 unless they name another playbook), in the order a full run
#: first needs them. Tests ask for them with ``run_2021(key)``.
LONG_RUNS: dict[str, dict] = {
    "historical": {"runbook": "historical", "attribution": True},
    "blind": {"runbook": str(RUNBOOKS / "blind.yaml"), "duration": "3h"},
    "restart": {"runbook": str(RUNBOOKS / "restart.yaml"), "duration": "2h",
                "sets": {"trigger_enabled": False, "latent_bug": False}},
    "protect-early": {"runbook": "protect-early", "duration": "3h"},
    "protect-early-s5": {"runbook": "protect-early", "seed": 5, "duration": "2h"},
    "none": {"runbook": "none", "duration": "12h40m"},
    "bug-off": {"runbook": "none", "duration": "2h", "sets": {"latent_bug": False}},
    "no-trigger": {"runbook": "none", "duration": "2h", "sets": {"trigger_enabled": False}},
    "dns-only": {"runbook": str(RUNBOOKS / "dns-only.yaml"), "duration": "4h"},
    "capacity-only": {"runbook": str(RUNBOOKS / "capacity-only.yaml"), "duration": "9h"},
    "oob": {"runbook": str(RUNBOOKS / "blind.yaml"), "duration": "3h", "sets": {"out_of_band_monitoring": True}},
    # protection at 08:00 by a deployment that does not cross the bridge, at two ticks
    "tick1": {"runbook": str(RUNBOOKS / "protect-at-8.yaml"), "duration": "100m",
              "sets": {"out_of_band_deployment": True}},
    "tick025": {"runbook": str(RUNBOOKS / "protect-at-8.yaml"), "duration": "100m",
                "sets": {"out_of_band_deployment": True}, "tick": "0.25s"},
    "2025-historical": {"playbook": "us-east-1-2025", "runbook": "historical"},
}


def claim(out: Path) -> bool:
    """Take the run ``out`` for this process; False if another process has it."""
    try:
        os.close(os.open(f"{out}.claim", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False


def play(out: Path, key: str) -> None:
    """Play ``LONG_RUNS[key]`` into ``out`` (claimed by this process) and say it is done, or
    that it failed."""
    import orchestrator

    try:
        orchestrator.run(out=out, **LONG_RUNS[key])
    except BaseException:
        Path(f"{out}.failed").touch()  # the tests waiting for it stop waiting
        raise
    Path(f"{out}.done").touch()


def main(where: Path) -> None:
    # The lowest priority: this process only takes what the tests leave idle, and never
    # starves the Ray workers (which Ray runs niced) of the tests that host worlds on Ray.
    os.nice(19)
    for key in LONG_RUNS:
        if claim(where / key):
            play(where / key, key)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
