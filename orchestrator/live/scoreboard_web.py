"""The scoreboard page for a projector, served on 127.0.0.1 by ``gameday serve``.

``GET /`` is one self-contained page (inline CSS and JS) that fetches
``/scoreboard.json`` once a second and redraws its table; ``GET /scoreboard.json`` is
the server's latest board. Nothing else is served.
"""
from __future__ import annotations

import errno
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from orchestrator.errors import GamedayError

HOST = "127.0.0.1"  # loopback only: the page has no authentication

# The page may load nothing from elsewhere and talk only to this server.
CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
       "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'")

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>gameday scoreboard</title>
<style>
  html { background: #101418; color: #f2f2f2; font-family: system-ui, sans-serif; }
  body { margin: 2vw 3vw; font-size: clamp(14px, 1.8vw, 40px); }
  header { display: flex; flex-wrap: wrap; align-items: baseline; gap: 0 1.5em; }
  h1 { font-size: 1.4em; margin: 0; }
  #clock { font-size: 2.4em; font-variant-numeric: tabular-nums; font-weight: 700; }
  #meta, #status { color: #a8b3bd; }
  #state { padding: 0 .4em; border-radius: .2em; background: #35414c; }
  #state.running { background: #1d6b35; }
  #state.paused { background: #8a6d00; }
  #state.ended { background: #6b1d1d; }
  #status { min-height: 1.3em; margin: .3em 0; }
  body.lost #status { color: #ff8080; font-weight: 700; }
  table { width: 100%; border-collapse: collapse; margin-top: .5em; font-variant-numeric: tabular-nums; }
  th, td { padding: .3em .5em; text-align: left; border-bottom: 1px solid #2c353e; }
  td { white-space: nowrap; }
  th { color: #a8b3bd; font-weight: 600; font-size: .8em; }
  td.num, th.num { text-align: right; }
  td.team { font-weight: 700; }
  tbody tr:first-child td { color: #ffd75e; }
</style>
</head>
<body>
<header>
  <h1 id="title">scoreboard</h1>
  <span id="clock">--:--:--</span>
  <span id="state">connecting</span>
  <span id="meta"></span>
</header>
<div id="status"></div>
<table>
  <thead><tr>
    <th class="num">rank</th><th>team</th><th>loop broken</th><th>backlog drained</th>
    <th class="num">impact so far</th><th>first customer update</th><th class="num">actions</th>
    <th class="num">consoles</th>
  </tr></thead>
  <tbody id="rows"></tbody>
</table>
<script>
"use strict";
// Data goes into the page only through textContent: nothing served is parsed as HTML.
const $ = (id) => document.getElementById(id);
const POLL_MS = 1000;

function cell(tr, value, numeric, cls) {
  const td = document.createElement("td");
  td.textContent = value;
  if (numeric) td.classList.add("num");
  if (cls) td.classList.add(cls);
  tr.appendChild(td);
}

// Draws the board; returns true once the session has ended.
function render(board) {
  const s = board.session;
  if (!s) {  // the server has not published a board yet
    $("status").textContent = "waiting for the session";
    return false;
  }
  const ended = s.state === "ended";
  $("title").textContent = ended ? "final ranking" : "scoreboard";
  $("clock").textContent = s.clock + " / " + s.end_clock;
  $("state").textContent = s.state;
  $("state").className = s.state;
  const speed = typeof s.speed === "number" ? s.speed + "x" : s.speed;
  let meta = s.playbook + ", seed " + s.seed + ", speed " + speed;
  if (s.lag_s > 1) meta += ", lag " + s.lag_s.toFixed(1) + " s";
  $("meta").textContent = meta;
  const consoles = board.consoles || {};
  const body = document.createElement("tbody");
  body.id = "rows";
  for (const t of (board.teams || []).slice().sort((a, b) => a.rank - b.rank)) {
    const tr = document.createElement("tr");
    cell(tr, String(t.rank), true);
    cell(tr, t.team, false, "team");
    cell(tr, t.loop || "-");
    cell(tr, t.backlog || "-");
    cell(tr, typeof t.impact === "number" ? t.impact.toFixed(1) : "-", true, "impact");
    cell(tr, t.first_update || "-");
    cell(tr, String(t.actions), true);
    cell(tr, t.team in consoles ? String(consoles[t.team]) : "-", true);
    body.appendChild(tr);
  }
  $("rows").replaceWith(body);  // one swap: the projector never shows a half-drawn table
  $("status").textContent = ended ? "the session has ended" : "";
  return ended;
}

async function poll() {
  let ended = false;
  try {
    const r = await fetch("/scoreboard.json", {cache: "no-store"});
    if (!r.ok) throw new Error("HTTP " + r.status);
    const board = await r.json();
    document.body.classList.remove("lost");
    ended = render(board);
  } catch (e) {
    // keep the last board on screen and try again: the server may be back
    document.body.classList.add("lost");
    $("status").textContent = "connection lost, retrying";
  }
  if (!ended) setTimeout(poll, POLL_MS);  // after the answer, so slow answers never pile up
}
poll();
</script>
</body>
</html>
""".encode()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, get_json):
        self.get_json = get_json
        super().__init__((HOST, port), _Handler)

    def shutdown(self) -> None:
        """Stop serving and free the port (the caller only calls shutdown)."""
        super().shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if path == "/":
            self._send(200, "text/html; charset=utf-8", PAGE)
        elif path == "/scoreboard.json":
            try:
                body = self.server.get_json().encode()
            except Exception:  # the page shows "connection lost" and retries
                self._send(503, "text/plain; charset=utf-8", b"scoreboard unavailable\n")
                return
            self._send(200, "application/json", body)
        else:
            self._send(404, "text/plain; charset=utf-8", b"not found\n")

    def _send(self, status: int, ctype: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Security-Policy", CSP)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args) -> None:
        pass  # one line per request, every second per projector, would drown the server's output


def start_web(get_json, port: int) -> tuple[ThreadingHTTPServer, str]:
    """Serve the page on 127.0.0.1:``port`` (0: a free port) in a daemon thread.
    ``get_json()`` gives the board as a JSON string. Returns (server, url);
    ``server.shutdown()`` stops it."""
    try:
        server = _Server(port, get_json)
    except OSError as e:
        hint = "; pass another --web-port (0 picks a free one) or --no-web" if e.errno == errno.EADDRINUSE else ""
        raise GamedayError(f"cannot serve the scoreboard page on {HOST}:{port}: {e.strerror or e}{hint}") from None
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, name="scoreboard-web",
                     daemon=True).start()
    return server, f"http://{HOST}:{server.server_address[1]}/"
