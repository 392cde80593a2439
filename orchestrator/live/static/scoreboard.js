"use strict";
// The projector's scoreboard: fetches /scoreboard.json once a second and redraws its
// table, and under it each team's loop health over time (what the loop_broken milestone
// reads, 100%: every quantity of the loop within bounds) with its actions, the faults
// injected into its world, and its loop breaking and re-forming marked on it.
const POLL_MS = 1000;
const TOKEN = gd.token();
const MARK_COLORS = {action: "#5ab0ff", fault: "#ff5a5a", relapse: "#ffb347", milestone: "#7ddc7d"};
const charts = {};  // team -> {plot, panel, legend, marks}

function drawMarks(u, marks) {
  const ctx = u.ctx;
  ctx.save();
  ctx.lineWidth = 2 * devicePixelRatio;
  for (const [x, kind] of marks) {
    const px = u.valToPos(x, "x", true);
    ctx.strokeStyle = MARK_COLORS[kind] || "#ffffff";
    ctx.setLineDash(kind === "fault" ? [6, 4] : []);
    ctx.beginPath();
    ctx.moveTo(px, u.bbox.top);
    ctx.lineTo(px, u.bbox.top + u.bbox.height);
    ctx.stroke();
  }
  ctx.restore();
}

function healthChart(t) {
  let c = charts[t.team];
  if (!c) {
    const panel = gd.el("div", null, "panel");
    panel.dataset.team = t.team;
    panel.appendChild(gd.el("h3", t.team));
    const box = gd.el("div");
    panel.appendChild(box);
    const legend = gd.el("div", "", "legend");
    panel.appendChild(legend);
    gd.$("health").appendChild(panel);
    c = {panel, legend, marks: []};
    c.plot = new uPlot({
      width: Math.max(280, panel.clientWidth - 10), height: 160, legend: {show: false}, cursor: {show: false},
      scales: {x: {time: false}, y: {range: [0, 1]}},
      axes: [{stroke: "#a8b3bd", grid: {stroke: "#242c34"}, values: gd.clockAxis},
             {stroke: "#a8b3bd", grid: {stroke: "#242c34"}, size: 50,
              values: (u, vals) => vals.map((v) => Math.round(v * 100) + "%")}],
      series: [{}, {stroke: "#7ddc7d", fill: "rgba(125,220,125,0.12)", width: 2, spanGaps: false, points: {show: false}}],
      hooks: {draw: [(u) => drawMarks(u, c.marks)]},
    }, [[], []], box);
    charts[t.team] = c;
  }
  const health = t.health || [];
  c.marks = t.marks || [];
  c.plot.setData([health.map((p) => p[0]), health.map((p) => p[1])]);
  c.panel.dataset.points = String(health.length);
  c.panel.dataset.marks = String(c.marks.length);
  c.legend.textContent = c.marks.slice(-4).map(([x, kind, what]) => gd.clock(x) + " " + kind + " " + what).join(" · ");
}

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
  for (const t of board.teams || []) healthChart(t);
  gd.$("status").textContent = ended ? "the session has ended" : "";
  return ended;
}

async function poll() {
  let ended = false;
  try {
    const r = await fetch("/scoreboard.json", {cache: "no-store", headers: {Authorization: "Bearer " + TOKEN}});
    if (r.status === 401) {  // a wrong or missing token: nothing to show, nothing to retry
      gd.$("status").textContent = "This link's token does not open the scoreboard. Use the link `gameday serve` printed.";
      gd.$("state").textContent = "no access";
      document.body.classList.add("lost");
      return;
    }
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
