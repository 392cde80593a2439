"""Every bound gameday puts on what it is given, written once.

A playbook may come from another team and a live session faces many clients, so nothing
a file, a flag or a request says may take unbounded memory, time or disk. The readers,
validation, the template sandbox and the live server take their limits from here, and
the playbook reference prints them (``gameday playbooks reference``).
"""
from __future__ import annotations

from agents import limits
from reports import files as run_files


def size_text(n: int) -> str:
    """A budget in bytes as messages and the reference say it: 2 MiB, 1 GiB."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n} bytes"


# -- files -----------------------------------------------------------------------------
#: a playbook, runbook or vars file, in bytes (the built-in playbooks are under 20 KB);
#: only regular files are read (not a FIFO, a device or /dev/zero)
FILE_BYTES = 2 * 2**20

# -- YAML ------------------------------------------------------------------------------
#: how deep mappings and lists may nest in one YAML document
YAML_DEPTH = 64
#: the nodes a YAML document may hold, every alias counted as often as it is used (a
#: "billion laughs" document names a list of nine aliases of a list of nine aliases ...)
YAML_NODES = 200_000

# -- templates -------------------------------------------------------------------------
#: a playbook template's rendering: seconds of CPU and wall time
TEMPLATE_SECONDS = 10.0
#: memory a rendering may take beyond what gameday already holds, in bytes
TEMPLATE_MEMORY = 1 * 2**30
#: the text a rendering may produce, in bytes
RENDERED_BYTES = 4 * FILE_BYTES

# -- a run ------------------------------------------------------------------------------
#: the slowest pace a paced run (--speed) may keep: simulated seconds per wall second
SLOWEST_SPEED = 0.001
#: the runs a comparison or a phase map plans (seeds x runbooks x sweep points): each is planned,
#: and its playbook checked, before the first is played
MOST_RUNS = 1_000_000

# -- a run directory, as `report`, `replay`, `fork` and a comparison's cache read it ------
# (written in reports/files.py, beside its readers: reports import nothing of orchestrator)

#: a run directory's JSON file (meta.json, score.json ...) and a comparison's cached row, in
#: bytes (a run writes a few KB)
RUN_JSON_BYTES = run_files.JSON_BYTES
#: a value of metrics.csv, in bytes with its comma: the file holds at most its header and a
#: row a tick of meta.json's ticks_planned of this times its columns (a float is written in
#: 17 characters at most, a 64-bit count in 20; the built-in scenarios' take about 3)
METRICS_VALUE_BYTES = run_files.METRICS_VALUE_BYTES
#: events.jsonl, in bytes, beyond EVENTS_TICK_BYTES a tick of meta.json's ticks_planned: room
#: for a live game day's messages and commands
EVENTS_BYTES = run_files.EVENTS_BYTES
#: the events of one tick, in bytes (the busiest tick of the built-in scenarios writes under
#: 600 bytes, their longest line under 300)
EVENTS_TICK_BYTES = run_files.EVENTS_TICK_BYTES

# -- what a playbook says ----------------------------------------------------------------
#: what the name of a part of the world (a device pool, service, population, controller) or
#: of a playbook is made of: letters, digits, "-" and "_", starting with a letter or digit
#: (they become metric columns "NAME.metric" and folder names: no dots, slashes or spaces)
NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9_-]*"
NAME_CHARS = 64
#: a text (a title, a description, a rule's label), in characters; no control characters
#: but newlines and tabs
TEXT_CHARS = 10_000
#: every number a playbook, a runbook, --set or --vars gives, in absolute value (integers
#: are exact in a float up to 2^53, about 9e15; the model counts clients and requests in
#: 64-bit integers), and the requests a second a population may send (clients x rate x its factors)
LARGEST_NUMBER = limits.LARGEST_NUMBER

# -- the live server ---------------------------------------------------------------------
# Who a client is: the server binds loopback by default, so every team may come from
# 127.0.0.1 (on one machine, or through SSH tunnels); an address names no one. A valid
# token names a team's seat (or the facilitator, or the scoreboard), so what a client may
# hold is capped per token; what has shown no valid token yet is capped and limited apart,
# so that neither a flood of wrong tokens nor one token's many pages takes what the
# others need.

#: requests per second per token, sustained (a console polls twice a second, a page is
#: pushed its state at most four times a second); commands per token, reads per connection
LIVE_RATE_PER_TOKEN = 20.0
#: requests a token may send at once above that rate (a page reconnecting resends its own)
LIVE_BURST_PER_TOKEN = 60
#: per token: answered request ids remembered, so a resent command is answered, not run again
LIVE_REPLIES_KEPT = 2000
#: requests without a valid token (a wrong token, a malformed request) one source may make
#: per second before its requests are refused unread (a person mistyping a token fails a
#: few times; a ZeroMQ source is one connection, a web source one address)
LIVE_FAILURES_PER_S = 5.0
#: such requests one source may make at once (a console's request and its resends fail together)
LIVE_FAILURE_BURST = 20
#: requests without a valid token from all sources together, per second: a flood from many
#: connections; then only connections that have shown a valid token are read (ten times one source's)
LIVE_ALL_FAILURES_PER_S = 50.0
#: such requests from all sources together at once
LIVE_ALL_FAILURE_BURST = 200
#: seconds a connection's state (its rate bucket, console name, valid token) is kept after it
#: was last heard: ZeroMQ does not say when a peer leaves, and consoles poll twice a second
LIVE_FORGET_S = 60.0
#: connections (or sources) whose state is kept at once, the longest silent forgotten first:
#: a few hundred bytes each, so a flood of new connections holds at most a few MB
LIVE_CONNECTIONS_KEPT = 10_000
#: a text a live console shows as one line (a message, a note, a hint, a parameter), in characters
LIVE_TEXT_CHARS = 500
#: pages (WebSockets) open at once with one token: a team's people with a tab or two each;
#: past it a page is refused and tries again by itself (each holds a ZeroMQ socket)
LIVE_PAGES_PER_TOKEN = 16
#: pages open that have not shown a valid token yet, all clients together; past it the one
#: waiting longest is closed, never a new one refused (a page says hello as soon as it is
#: open, so only a silent one is ever the oldest; a few KB each)
LIVE_PAGES_WAITING = 256
#: seconds a console's connection has to complete ZeroMQ's handshake before it is dropped
#: (libzmq's default is 30: a client that connects and says nothing holds its place that long)
LIVE_HANDSHAKE_S = 5.0
#: seconds a page has to say hello with its token (a browser says it at once; a slow tunnel
#: takes well under a second)
LIVE_HELLO_WITHIN_S = 5.0
#: HTTP connections open at once, all clients together; past it the longest idle one is
#: closed, never a new one refused (a browser opens about six per site; a few KB each)
LIVE_HTTP_CONNECTIONS = 1000
#: seconds an HTTP connection may stay idle, or take to send its request, before it is
#: closed (the scoreboard page reuses its connection every second)
LIVE_HTTP_IDLE_S = 15.0
#: seconds a page being closed has to answer the close before its connection is cut (a
#: browser answers at once; one that never does cannot hold connections past the caps)
LIVE_CLOSE_WITHIN_S = 2.0
#: notices of malformed HTTP requests (no Host, a control character in a header) the serve
#: terminal shows at once; each is answered 400 and counted, a flood of them is not shown
LIVE_HTTP_NOTICE_BURST = 5
#: seconds between two such notices once the burst is spent (each says how many it stands for)
LIVE_HTTP_NOTICE_EVERY_S = 60.0
#: a session's journal.jsonl, in bytes, as `gameday serve --resume` reads it whole (a line of a
#: few hundred bytes per control and team command: a long game day writes well under a MB)
LIVE_JOURNAL_BYTES = 64 * 2**20
#: the teams a live session plays (each is a world of its own, stepped every tick)
LIVE_TEAMS = 64
