"""The table printed at the end of a run: each measure beside par."""
from __future__ import annotations

from .rundir import RunData
from .timefmt import format_delta


def relapse_note(m: dict) -> str:
    """`` (first 11:02, relapsed 11:40)`` for a milestone of score.json that relapsed."""
    if not m.get("relapses"):
        return ""
    # (a relapse follows a first confirmation: first_at is there, and every time has its clock)
    first = m["first_at"]["clock"]
    again = ", ".join(r["clock"] for r in m["relapses"])
    return f" (first {first}, relapsed {again})"


def not_reached(m: dict) -> str:
    """A milestone not reached: never impaired (its condition held all along after the
    trigger, so there was nothing to reach), or not reached."""
    return "never impaired" if m.get("impaired") is False else "not reached"


def posts_updates(playbook: dict) -> bool:
    """Whether anything in a (rendered) playbook can post a customer update: a run of one
    that cannot has no first-update measure to reach."""
    return any(e.get("op") == "post" for section in ("mitigations", "triggers", "faults")
               for a in playbook.get(section) or [] for e in a.get("effects") or [])


def summary_table(run: RunData) -> str:
    s = run.score or {}
    meta = run.meta
    lines = [f"{meta.get('playbook')} / runbook {meta.get('runbook')} / seed {meta.get('seed')}"
             f"  ({meta.get('status')}, simulated until {s.get('simulated_until', '?')})", ""]
    rows = [("measure", "yours", "par", "vs par")]

    def add(label: str, m: dict | None):
        if not m:
            return
        yours = m["clock"] if m.get("reached") else not_reached(m)
        yours += relapse_note(m)
        par = m["par_clock"] if "par_clock" in m else ""  # (only where par names the measure)
        rows.append((label, yours, par, format_delta(m.get("vs_par_s"))))

    add("trigger", s.get("trigger"))
    update = s.get("first_customer_update") or {}
    playbook = run.playbook if run.dir else None
    if update.get("reached") or update.get("par_clock") or playbook is None or posts_updates(playbook):
        add("first customer update", update)
    for pop, m in (s.get("recovered") or {}).items():
        add(f"{pop} recovered", m)
    if s.get("loop_formed") is False:
        rows.append(("loop broken", "loop never formed", "", ""))
    else:
        add("loop broken", s.get("loop_broken"))
    add("devices healthy", s.get("devices_healthy"))
    add("backlog drained", s.get("backlog_drained"))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for i, r in enumerate(rows):
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    impact = s.get("impact") or {}
    late = impact.get("late_minutes") or {}
    weights = playbook["scoring"]["impact"] if playbook is not None else {}
    lines += ["", f"impact ({'minutes failing or late' if late else 'error-minutes'}, weighted): "
                  f"{impact.get('weighted_total', 0):.1f}" + (", each population's minutes times its weight:"
                                                               if weights else "")]
    for pop, v in (impact.get("error_minutes") or {}).items():
        lines.append(f"  {pop:24s} {v:10.1f} error-minutes" + (f", {late[pop]:.1f} late" if pop in late else "")
                     + (f", weight {weights[pop]:g}" if pop in weights else ""))
    collateral = s.get("collateral") or {}
    lines.append(f"collateral (connections broken by actions): {collateral.get('connections_broken_by_actions', 0)}")
    if collateral.get("requests_turned_away"):
        by = ", ".join(f"{k} {v:,}" for k, v in (collateral.get("requests_turned_away_by") or {}).items() if v)
        lines.append(f"collateral (turned away: attempts a throttle refused, retries included, and requests held back): {collateral['requests_turned_away']:,}"
                     + (f" ({by})" if by else ""))
    lines.append(f"actions taken: {s.get('actions_taken', 0)}")
    return "\n".join(lines)
