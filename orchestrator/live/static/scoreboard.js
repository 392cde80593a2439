"use strict";
// The projector's scoreboard: fetches /scoreboard.json once a second and redraws its table.
const POLL_MS = 1000;

function cell(tr, value, numeric, cls) {
  tr.appendChild(gd.el("td", value, [numeric ? "num" : "", cls || ""].join(" ").trim() || undefined));
}

// Draws the board; returns true once the session has ended.
function render(board) {
  const s = board.session;
  if (!s) {  // the server has not published a board yet
    gd.$("status").textContent = "waiting for the session";
    return false;
  }
  const ended = s.state === "ended";
  gd.$("title").textContent = ended ? "final ranking" : "scoreboard";
  gd.$("clock").textContent = s.clock + " / " + s.end_clock;
  gd.$("state").textContent = s.state;
  gd.$("state").className = s.state;
  const speed = typeof s.speed === "number" ? s.speed + "x" : s.speed;
  let meta = s.playbook + ", seed " + s.seed + ", speed " + speed;
  if (s.lag_s > 1) meta += ", lag " + s.lag_s.toFixed(1) + " s";
  gd.$("meta").textContent = meta;
  const consoles = board.consoles || {};
  const body = gd.el("tbody");
  body.id = "rows";
  for (const t of (board.teams || []).slice().sort((a, b) => a.rank - b.rank)) {
    const tr = gd.el("tr");
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
  gd.$("rows").replaceWith(body);  // one swap: the projector never shows a half-drawn table
  gd.$("status").textContent = ended ? "the session has ended" : "";
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
    gd.$("status").textContent = "connection lost, retrying";
  }
  if (!ended) setTimeout(poll, POLL_MS);  // after the answer, so slow answers never pile up
}
poll();
