"""What the team console shows and what it understands: plain functions from the
server's ``state`` result (see ``Session.team_state``) to text, and from a typed line
to a request. No I/O here, so that ``console_app`` stays thin and this is easy to test.
What people and the playbook wrote (names, messages, parameters, descriptions) is shown
through ``protocol.for_terminal``: no control character reaches the terminal, and no
text can pass for a line of its own.
"""
from __future__ import annotations

import shlex

from agents.base import RATIO
from orchestrator.errors import nearest
from orchestrator.live.protocol import for_terminal, kept_pace
from reports.timefmt import format_clock, format_duration, parse_clock

BLOCKS = "▁▂▃▄▅▆▇█"
GAP = "·"  # a sample the console did not get (no data, or stale)
SPARK_WIDTH = 30
DONE_SHOWN = 3  # finished actions shown below the ones in flight
COMMANDS = ("help", "catalogue", "list", "act", "logs", "post", "note", "quit")

HELP = """\
commands:
  help                          this text
  catalogue  (or list)          the mitigations: parameters, lead time, deployment steps, risk
  act NAME [param=value ...]    ask your operator for a mitigation (or just: NAME [param=value ...])
  logs                          query the logs for ground truth (answers arrive later)
  post MESSAGE...               post a customer status update
  note TEXT...                  a note in your team's timeline: what you saw, why you acted
  quit                          leave the console (also Ctrl-C or Ctrl-D)
values: numbers, true/false, or text (quote text with spaces: message="a b").
keys: Tab completes, Up/Down recall commands, PageUp/PageDown scroll the feed, Ctrl-L redraws."""


# -- values ---------------------------------------------------------------------------------------

def full_clock(clock: str | None) -> str:
    """HH:MM:SS always (the server writes whole minutes as HH:MM), so columns line up."""
    if not clock:
        return "--:--:--"
    try:
        return format_clock(parse_clock(clock), with_seconds=True)
    except ValueError:
        return for_terminal(clock)


def format_age(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    s = int(round(seconds))
    if s < 90:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def format_value(metric: str, value) -> str:
    """A metric's value as an operator reads it: ratios in %, delays in ms, counts whole."""
    if value is None:
        return "NO DATA"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return for_terminal(value)
    name = metric.rsplit(".", 1)[-1]
    if name.endswith(("ratio", "utilisation", "utilization")):
        return f"{value * 100:.1f}%"
    if name.endswith("_ms"):
        return f"{value / 1000:.2f} s" if abs(value) >= 1000 else f"{value:.1f} ms"
    if abs(value) >= 1e6:
        return f"{value / 1e6:.2f}M"
    if float(value).is_integer():
        return f"{value:,.0f}"
    return f"{value:.3g}"


def sparkline(history: list, width: int = SPARK_WIDTH, unit: str | None = None) -> str:
    """The last ``width`` samples as block characters, the newest at the right end. A
    ratio is drawn on a fixed scale from 0 to 100% (0.3% errors stay low, 99% high),
    anything else on its own range; None (no fresh sample) shows as a gap mark so an
    outage is visible."""
    samples = list(history)[-width:]
    known = [v for v in samples if v is not None]
    if not known:
        return GAP * len(samples)
    lo, hi = (0.0, max(1.0, *known)) if unit == RATIO else (min(known), max(known))
    out = []
    for v in samples:
        if v is None:
            out.append(GAP)
        elif hi == lo:  # flat: at the bottom when zero, mid-height otherwise
            out.append(BLOCKS[0] if v == 0 else BLOCKS[3])
        else:
            out.append(BLOCKS[round((v - lo) / (hi - lo) * (len(BLOCKS) - 1))])
    return "".join(out)


def _params_text(params: dict | None, limit: int = 40) -> str:
    parts = []
    for k, v in (params or {}).items():
        text = str(v).lower() if isinstance(v, bool) else str(v)
        if len(text) > limit:
            text = text[: limit - 1] + "…"
        parts.append(f"{for_terminal(k)}={shlex.quote(for_terminal(text)) if ' ' in text else for_terminal(text)}")
    return " ".join(parts)


# -- the status pane --------------------------------------------------------------------------------

def render_header(state: dict | None, disconnected: bool = False) -> str:
    s = (state or {}).get("session") or {}
    team = for_terminal((state or {}).get("team", "?"))
    parts = [f"gameday console · team {team}"]
    if s:
        parts.append(f"simulated {full_clock(s.get('clock'))} (ends {full_clock(s.get('end_clock'))})")
        speed = s.get("speed")
        parts.append(f"speed {speed:g}x" if isinstance(speed, (int, float)) else f"speed {for_terminal(speed)}")
        st = s.get("state", "?")
        parts.append({"waiting": "WAITING for the facilitator to start", "running": "running",
                      "paused": "PAUSED by the facilitator", "ended": "ENDED (type quit to leave)"}.get(st, for_terminal(st).upper()))
        pace = kept_pace(s)
        if pace is not None:
            parts.append(f"really {pace:.0f}x")
        elif st == "running" and (s.get("lag_s") or 0) >= 1:
            parts.append(f"server lags {s['lag_s']:.1f}s")
    if disconnected:
        parts.append("disconnected, retrying")
    elif not s:
        parts.append("waiting for the server")
    return " · ".join(parts)


def _metric_lines(metrics: list[dict]) -> list[str]:
    lines = [f"{'OBSERVED METRICS':<34}{'value':>12}  {'age':<10}trend, now at the right (ratios 0-100%; "
             f"{GAP} no fresh sample)"]
    for m in metrics:
        value = format_value(m["metric"], m.get("value"))
        if m.get("value") is None:
            age = "never" if m.get("age_s") is None else f"stale {format_age(m['age_s'])}"
        elif m.get("stale"):
            age = f"stale {format_age(m.get('age_s'))}"
        else:
            age = format_age(m.get("age_s"))
        lines.append(f"  {for_terminal(m['metric']):<32}{value:>12}  {age:<10}{sparkline(m.get('history') or [], unit=m.get('unit'))}")
    return lines


def action_progress(a: dict, now: str | None) -> str:
    """Where an action stands: waiting for its lead time, deploying step x/y, in effect."""
    st = a.get("state")
    if st == "effective":
        return f"in effect since {full_clock(a.get('effective'))}"
    if st == "requested":
        text = "requested, not yet picked up by the operator"
    elif st in ("started", "stepping") and a.get("steps"):
        ready = a.get("ready")
        if st == "started" and ready and now and _secs(now) is not None and _secs(now) < (_secs(ready) or 0):
            text = f"lead time, ready at {full_clock(ready)} (in {format_duration(_secs(ready) - _secs(now))})"
        else:
            text = f"deploying, step {a.get('steps_done', 0)}/{a['steps']} done"
    else:
        text = for_terminal(st or "?")
    failed = a.get("failed_steps") or 0
    if failed:
        text += f", {failed} failed step{'s' if failed != 1 else ''} retried"
    return text


def _secs(clock: str) -> float | None:
    try:
        return parse_clock(clock)
    except ValueError:
        return None


def _action_lines(actions: list[dict], now: str | None) -> list[str]:
    if not actions:
        return ["ACTIONS  none yet (type `catalogue` for the mitigations)"]
    flying = [a for a in actions if a.get("state") != "effective"]
    done = [a for a in actions if a.get("state") == "effective"]
    lines = [f"ACTIONS  {len(flying)} in flight, {len(done)} done"]
    for mark, a in [("▶", a) for a in flying] + [("✓", a) for a in done[-DONE_SHOWN:]]:
        params = _params_text(a.get("params"))
        lines.append(f"  {mark} {for_terminal(a['action'])}{' ' + params if params else ''} "
                     f"({for_terminal(a.get('by') or 'team')}) "
                     f"asked {full_clock(a.get('asked'))}: {action_progress(a, now)}")
    if len(done) > DONE_SHOWN:
        lines.append(f"    ({len(done) - DONE_SHOWN} earlier done)")
    return lines


def _pack(items: list[str], width: int, indent: str = "  ") -> list[str]:
    """Items side by side, as many per line as fit ``width``."""
    lines, cur = [], indent
    for item in items:
        if cur.strip() and len(cur) + len(item) + 3 > width:
            lines.append(cur.rstrip())
            cur = indent
        cur += item + "   "
    if cur.strip():
        lines.append(cur.rstrip())
    return lines


def render_status(state: dict | None, disconnected: bool = False, width: int = 120) -> str:
    """The top pane: header, observed metrics, alerts, actions, the team's score,
    facilitator messages, the last log query."""
    lines = [render_header(state, disconnected)]
    if not state:
        return "\n".join(lines)
    now = (state.get("session") or {}).get("clock")
    lines += [""] + _metric_lines(state.get("metrics") or [])
    alarms = state.get("alarms") or []
    lines.append("ALERTS   " + ("  ".join(f"[{for_terminal(a)}]" for a in alarms) if alarms else "none"))
    lines += _action_lines(state.get("actions") or [], now)
    score = state.get("score")
    if score:  # the team's own score as it stands
        reached = [f"{for_terminal(m['name'])} {full_clock(m['clock'])}" for m in score.get("milestones") or []
                   if m.get("clock")]
        rank = f"rank {score['rank']} of {score['of']} · " if score.get("rank") else ""
        lines.append(f"SCORE    {rank}loop {for_terminal(score.get('loop'))} · impact so far {float(score.get('impact', 0)):,.1f}"
                     + (f" · reached: {', '.join(reached)}" if reached else ""))
    for m in state.get("messages") or []:
        lines.append(f"FACILITATOR {full_clock(m.get('clock'))}: {for_terminal(m.get('text', ''))}")
    logs = state.get("logs") or []
    if logs:
        last = logs[-1]
        lines.append(f"LOG QUERY asked {full_clock(last.get('asked'))}, answered {full_clock(last.get('arrived'))} "
                     "(ground truth)")
        lines += _pack([f"{for_terminal(k)} {format_value(k, v.get('value'))}" for k, v in (last.get("values") or {}).items()],
                       width)
    return "\n".join(lines)


def render_feed_entry(e: dict) -> str:
    return f"{full_clock(e.get('clock'))} {for_terminal(e.get('kind', '')):<8}{for_terminal(e.get('text', ''))}"


def render_catalogue(catalogue: list[dict]) -> str:
    lines = ["mitigations (act NAME [param=value ...]):"]
    for m in catalogue:
        params = _params_text(m.get("params"))
        steps = f"{m['steps']} deployment step{'s' if m['steps'] != 1 else ''}" if m.get("deploy") else "no deployment"
        lines.append(f"  {for_terminal(m['name'])}{' ' + params if params else ''}: lead time "
                     f"{format_duration(m.get('lead_time_s', 0))}, {steps}, risk {for_terminal(m.get('risk', '?'))}. "
                     f"{for_terminal(m.get('description', ''))}")
    return "\n".join(lines)


def render_note_result(result: dict) -> str:
    return f"noted at {full_clock(result.get('clock'))}: {for_terminal(result.get('note'))}"


def render_act_result(result: dict) -> str:
    params = _params_text(result.get("params"))
    return (f"requested {for_terminal(result.get('action'))}{' ' + params if params else ''} "
            f"(takes effect at tick {result.get('tick')}, {full_clock(result.get('clock'))})")


# -- commands -------------------------------------------------------------------------------------

def parse_value(text: str):
    """A typed value: an int or float when it reads as one, true/false as a bool, else text."""
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _check_param(action: str, name: str, raw: str, default):
    """``raw`` as the type of the parameter's default (the server insists on it)."""
    value = parse_value(raw)
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ValueError(f"{action}: {name}={raw}: expected true or false")
    elif isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{action}: {name}={raw}: expected a whole number >= 0 (like {default})")
    elif isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ValueError(f"{action}: {name}={raw}: expected a number >= 0 (like {default})")
    elif isinstance(default, str):
        value = raw  # text parameters keep what was typed, even `123` or `true`
    return value


def _unknown(kind: str, name: str, known, hint: str) -> ValueError:
    close = nearest(name, known)
    maybe = f"; did you mean {close}?" if close else ""
    return ValueError(f"unknown {kind} {name!r}{maybe}; {hint}")


def _act(name: str, words: list[str], by_name: dict) -> tuple[str, dict]:
    m = by_name.get(name)
    if m is None:
        raise _unknown("action", name, by_name, "type `catalogue` for the list")
    declared = m.get("params") or {}
    params = {}
    for w in words:
        key, eq, raw = w.partition("=")
        if not eq or not key:
            raise ValueError(f"{name}: got {w!r}; expected param=value "
                             f"({', '.join(declared) if declared else f'{name} takes no parameters'})")
        if key not in declared:
            takes = f"it takes {', '.join(declared)}" if declared else "it takes none"
            raise ValueError(f"unknown parameter {key!r} for {name}; {takes}")
        params[key] = _check_param(name, key, raw, declared[key])
    return "act", {"action": name, "params": params}


def parse_command(line: str, catalogue: list[dict]) -> tuple[str, dict]:
    """(op, args) for a typed line: op is help, catalogue, quit, act (args: action,
    params) or note (args: text). Raises ValueError saying what is wrong and what was expected."""
    by_name = {m["name"]: m for m in catalogue}
    text = line.strip()
    if not text:
        raise ValueError("empty command; type `help` for the commands")
    head, _, rest = text.partition(" ")
    cmd = head.lower()
    if cmd in ("post", "note"):  # the text is the rest of the line, as typed
        message = rest.strip()
        if len(message) >= 2 and message[0] == message[-1] and message[0] in "'\"":
            message = message[1:-1]
        if not message:
            raise ValueError(f"{cmd} needs a text: {cmd} {'MESSAGE' if cmd == 'post' else 'TEXT'}...")
        if cmd == "note":
            return "note", {"text": message}
        if "post_status_update" not in by_name:
            raise ValueError("this scenario has no post_status_update action; type `catalogue` for the list")
        return "act", {"action": "post_status_update", "params": {"message": message}}
    try:
        words = shlex.split(text)
    except ValueError as e:
        raise ValueError(f"cannot read the line ({e}); close the quote") from None
    cmd, args = words[0].lower(), words[1:]
    if cmd in ("help", "catalogue", "list", "quit", "exit", "logs"):
        if args:
            raise ValueError(f"{cmd} takes nothing after it; got {' '.join(args)!r}")
        if cmd == "logs":
            return _act("query_logs", [], by_name)
        return {"list": "catalogue", "exit": "quit"}.get(cmd, cmd), {}
    if cmd == "act":
        if not args:
            raise ValueError("act needs an action: act NAME [param=value ...]; type `catalogue` for the list")
        return _act(args[0], args[1:], by_name)
    if words[0] in by_name:
        return _act(words[0], args, by_name)
    raise _unknown("command or action", words[0], list(COMMANDS) + list(by_name),
                   "type `help` for the commands or `catalogue` for the actions")


def completion_words(catalogue: list[dict]) -> list[str]:
    """Commands, action names and ``param=`` for Tab completion."""
    words = set(COMMANDS)
    for m in catalogue:
        words.add(m["name"])
        words.update(f"{p}=" for p in m.get("params") or {})
    return sorted(words)
