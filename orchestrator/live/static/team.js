"use strict";
// A team's console in the browser: the same state and the same commands as the terminal
// console, pushed by the server over a WebSocket (see orchestrator/live/web.py).
const COLORS = ["#5ab0ff", "#ffb347", "#7ddc7d", "#ff7a9a", "#c59cff", "#ffd75e"];

const team = {
  name: decodeURIComponent(location.pathname.split("/").pop()),
  feed: [],          // every feed entry, in order (entry n at index n)
  xs: [],            // the simulated clock of every view charted
  ys: [],            // per observed metric, its value in each view (null: no fresh sample)
  charts: [],        // per observed metric: {plot, panel, value}
  catalogue: null,
  results: {},       // request id -> the form's result element
  report: null,      // the team's after-action report, once the game day is over (gd.Report)
  state: null,
};
window.gamedayTeam = team;  // for whoever looks (the browser test does)

function formatValue(m, v) {
  if (v === null || v === undefined) return "NO DATA";
  if (typeof v !== "number") return String(v);
  if (m.unit === "ratio") return (v * 100).toFixed(1) + "%";
  if (m.unit === "ms") return Math.abs(v) >= 1000 ? (v / 1000).toFixed(2) + " s" : v.toFixed(1) + " ms";
  if (Math.abs(v) >= 1e6) return (v / 1e6).toFixed(2) + "M";
  return Number.isInteger(v) ? v.toLocaleString("en") : v.toPrecision(3);
}

const COMPACT = new Intl.NumberFormat("en", {notation: "compact", maximumFractionDigits: 1});

function formatAge(s) {
  if (s === null || s === undefined) return "never";
  s = Math.round(s);
  if (s < 90) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m";
  return Math.floor(s / 3600) + "h" + String(Math.floor((s % 3600) / 60)).padStart(2, "0") + "m";
}

// -- charts: one panel per observed metric, grouped by the part of the world it comes from --
function makeCharts(metrics) {
  const root = gd.$("charts");
  const groups = {};
  metrics.forEach((m, i) => {
    const agent = m.metric.split(".")[0];
    if (!groups[agent]) {
      const g = gd.el("div", null, "group");
      g.appendChild(gd.el("h3", agent));
      const grid = gd.el("div", null, "charts");
      g.appendChild(grid);
      root.appendChild(g);
      groups[agent] = grid;
    }
    const panel = gd.el("div", null, "panel");
    panel.dataset.metric = m.metric;
    const title = gd.el("div", null, "title");
    title.appendChild(gd.el("span", m.metric.slice(agent.length + 1)));
    const value = gd.el("span", "", "value");
    title.appendChild(value);
    panel.appendChild(title);
    const plotBox = gd.el("div");
    panel.appendChild(plotBox);
    groups[agent].appendChild(panel);
    const ratio = m.unit === "ratio";
    const opts = {
      width: Math.max(260, panel.clientWidth - 10), height: 150, legend: {show: false},
      cursor: {drag: {x: false, y: false}},
      scales: {x: {time: false}, y: ratio ? {range: (u, lo, hi) => [0, Math.max(1, hi || 0)]} : {}},
      axes: [
        {stroke: "#a8b3bd", grid: {stroke: "#242c34"}, values: gd.clockAxis},
        {stroke: "#a8b3bd", grid: {stroke: "#242c34"}, size: m.unit === "ms" ? 72 : 55,
         values: (u, vals) => vals.map((v) => ratio ? Math.round(v * 100) + "%" : m.unit === "ms" ? formatValue(m, v)
                                                                                      : COMPACT.format(v))},
      ],
      // a sample with no neighbour (one that came through a monitoring blackout) is drawn as a point
      series: [{}, {stroke: COLORS[i % COLORS.length], width: 2, spanGaps: false,
                    points: {show: true, size: 6, fill: COLORS[i % COLORS.length], filter: isolated}}],
    };
    team.ys.push([]);
    const plot = new uPlot(opts, [team.xs, team.ys[i]], plotBox);
    team.charts.push({plot, panel, value});
  });
}

// uPlot's point filter: the indices of the samples with no sample on either side (an empty
// list: none; null would draw every point)
function isolated(u, seriesIdx) {
  const ys = u.data[seriesIdx], out = [];
  for (let j = 0; j < ys.length; j++) {
    if (ys[j] !== null && ys[j] !== undefined && (j === 0 || ys[j - 1] === null) &&
        (j === ys.length - 1 || ys[j + 1] === null)) out.push(j);
  }
  return out;
}

function chart(st) {
  if (!team.charts.length) makeCharts(st.metrics);
  for (const [x, values] of st.series || []) {
    team.xs.push(x);
    values.forEach((v, i) => team.ys[i].push(v));
  }
  st.metrics.forEach((m, i) => {
    const c = team.charts[i];
    c.value.textContent = formatValue(m, m.value) + (m.value === null ? "" : " · " + (m.stale ? "stale " : "") +
                                                    formatAge(m.age_s));
    c.panel.classList.toggle("stale", !!m.stale);
    if ((st.series || []).length) c.plot.setData([team.xs, team.ys[i]]);
    c.panel.dataset.points = String(team.xs.length);
  });
}

// -- the mitigation catalogue, as forms ----------------------------------------------------------
function makeCatalogue(catalogue) {
  const root = gd.$("catalogue");
  for (const m of catalogue) {
    // a compact list: each mitigation a line (name, lead time, steps, risk) that opens to its form
    const item = gd.el("details", null, "mitigation");
    item.dataset.action = m.name;
    const how = ["lead time " + formatAge(m.lead_time_s)];
    how.push(m.deploy ? m.steps + " deployment steps" : "no deployment");
    if (m.risk) how.push("risk: " + (typeof m.risk === "object" ? JSON.stringify(m.risk) : m.risk));
    const summary = gd.el("summary");
    summary.appendChild(gd.el("strong", m.name));
    summary.appendChild(gd.el("span", " · " + how.join(" · "), "muted"));
    item.appendChild(summary);
    const form = gd.el("form", null, "mitigation");
    form.dataset.action = m.name;
    form.appendChild(gd.el("p", m.description, "muted"));
    for (const [name, dflt] of Object.entries(m.params || {})) form.appendChild(gd.paramInput(name, dflt));
    const button = gd.el("button", "Request");
    button.type = "submit";
    form.appendChild(button);
    const result = gd.el("span", "", "result");
    form.appendChild(result);
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      ask("act", {action: m.name, params: gd.readParams(form)}, {result, button});
    });
    item.appendChild(form);
    root.appendChild(item);
  }
}

// -- notes: what the team saw and why it acted, in its timeline at the simulated clock -----------
function makeNoteForm() {
  const form = gd.$("note-form"), input = gd.$("note"), result = gd.$("note-result");
  const button = form.querySelector("button");
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const text = input.value.trim();
    if (text) ask("note", {text: text}, {result, button, input});
  });
}

// A team's command from one of its forms, said by whoever the page says it is; ``form`` holds
// the form's result, button (and input) until the answer comes (``answered``).
function ask(op, args, form) {
  const who = gd.$("who").value.trim();
  if (who) args.by = who;
  form.button.disabled = true;
  form.result.textContent = "sending";
  form.result.className = "result";
  team.results[conn.request(op, args)] = form;
}

function answered(msg) {
  if (team.report && team.report.answered(msg)) return;
  const form = team.results[msg.id];
  if (!form) return;
  if (gd.unanswered(msg)) { form.result.textContent = "no answer from the session yet; asking again"; return; }
  delete team.results[msg.id];
  form.button.disabled = gd.over;
  if (msg.ok) {
    form.result.textContent = (form.input ? "noted at " : "requested at ") + msg.result.clock;
    if (form.input) form.input.value = "";
  } else {
    form.result.textContent = "refused: " + msg.error.message;
    form.result.className = "result error";
  }
}

// -- the rest of the state ------------------------------------------------------------------------
// how a feed entry stands out: an alert firing in red, one cleared in green, a team's note in blue,
// a facilitator's hint in gold
const FEED_CLASS = {alert: "alert", cleared: "cleared", note: "note", hint: "hint"};

// A log query's answer as a table: each metric, its value (as monitoring would show it), its age.
function logItem(l) {
  const li = gd.el("li");
  li.appendChild(gd.el("div", "asked " + l.asked + ", answered " + l.arrived + " (ground truth)", "muted"));
  const table = gd.el("table", null, "log");
  for (const [metric, v] of Object.entries(l.values)) {
    const tr = gd.el("tr");
    tr.appendChild(gd.el("td", metric));
    tr.appendChild(gd.el("td", logValue(metric, v.value), "num"));
    tr.appendChild(gd.el("td", "age " + formatAge(v.age_s), "muted"));
    table.appendChild(tr);
  }
  li.appendChild(table);
  return li;
}

function logValue(metric, v) {
  if (typeof v !== "number") return v === null || v === undefined ? "no data" : String(v);
  const name = metric.split(".").pop();
  if (/ratio|utilisation|share|fraction/.test(name) && Math.abs(v) <= 1.5) return (v * 100).toFixed(1) + "%";
  return v.toLocaleString("en", {maximumSignificantDigits: 4});
}

function list(id, items, make) {
  const ul = gd.$(id);
  const fresh = ul.cloneNode(false);
  for (const item of items) fresh.appendChild(make(item));
  ul.replaceWith(fresh);
}

function actionItem(a, now) {
  const li = gd.el("li");
  li.dataset.command = a.command || "";
  li.dataset.state = a.state;
  li.appendChild(gd.el("strong", a.action));
  const params = Object.entries(a.params || {}).map(([k, v]) => k + "=" + v).join(" ");
  if (params) li.appendChild(gd.el("span", " " + params, "muted"));
  li.appendChild(gd.el("span", " · " + a.state + " · asked " + a.asked + (a.by ? " by " + a.by : "")));
  if (a.steps) {
    const p = gd.el("progress");
    p.max = a.steps; p.value = a.steps_done;
    li.appendChild(gd.el("span", " "));
    li.appendChild(p);
    li.appendChild(gd.el("span", " " + a.steps_done + "/" + a.steps + " steps" +
                          (a.failed_steps ? ", " + a.failed_steps + " failed" : "")));
  }
  if (a.ready) li.appendChild(gd.el("span", " · ready " + a.ready, "muted"));
  const left = a.state === "started" && a.ready && now ? seconds(a.ready) - seconds(now) : 0;
  if (left > 0) li.appendChild(gd.el("span", " · ready in " + formatLeft(left), "countdown"));  // in simulated time
  if (a.effective) li.appendChild(gd.el("span", " · in effect " + a.effective));
  return li;
}

// HH:MM[:SS] as seconds after midnight; a span of seconds as 1h02m, 4m05s or 35s
function seconds(clock) {
  const [h, m, s] = clock.split(":").map(Number);
  return h * 3600 + m * 60 + (s || 0);
}

function formatLeft(s) {
  s = Math.round(s);
  if (s >= 3600) return Math.floor(s / 3600) + "h" + String(Math.floor((s % 3600) / 60)).padStart(2, "0") + "m";
  return s >= 60 ? Math.floor(s / 60) + "m" + String(s % 60).padStart(2, "0") + "s" : s + "s";
}

// -- the team's own score as it stands: its loop, impact so far, milestones beside par ------------
function vsPar(s) {
  const minutes = Math.round(Math.abs(s) / 60);
  return minutes === 0 ? "on par" : minutes + " min " + (s < 0 ? "ahead of" : "behind") + " par";
}

function renderScore(score) {
  if (!score) return;
  const root = gd.$("score");
  root.textContent = "";
  root.appendChild(gd.el("p", (score.rank ? "rank " + score.rank + " of " + score.of + " · " : "") +
                              "loop " + score.loop + " · impact so far " +
                              score.impact.toLocaleString("en", {maximumFractionDigits: 1}), "score-head"));
  const table = gd.el("table", null, "milestones");
  for (const m of score.milestones) {
    const tr = gd.el("tr", null, m.clock ? "reached" : "pending");
    tr.dataset.milestone = m.name;
    tr.appendChild(gd.el("td", m.name));
    tr.appendChild(gd.el("td", m.clock || "not yet"));
    tr.appendChild(gd.el("td", m.par ? "par " + m.par + (m.vs_par_s === null || m.vs_par_s === undefined ? "" :
                                                          " · " + vsPar(m.vs_par_s)) : "", "muted"));
    table.appendChild(tr);
  }
  root.appendChild(table);
}

// The game day is over: the team's result, and nothing left to ask for.
function over(score) {
  gd.over = true;
  const result = gd.$("result");
  result.textContent = "The game day is over. Your result: " + (score.rank ? "rank " + score.rank + " of " +
    score.of + " · " : "") + "loop " + score.loop + " · impact " +
    score.impact.toLocaleString("en", {maximumFractionDigits: 1});
  result.hidden = false;
  for (const button of document.querySelectorAll("#catalogue button, #note-form button")) button.disabled = true;
  if (!team.report) {
    team.report = new gd.Report(conn, gd.$("report"), "your team's after-action report");
    team.report.ask();
  }
}

function render(st) {
  team.state = st;
  const s = st.session;
  gd.$("title").textContent = "team " + st.team;
  gd.$("clock").textContent = s.clock + " / " + s.end_clock;
  gd.$("state").textContent = s.state;
  gd.$("state").className = s.state;
  const speed = typeof s.speed === "number" ? s.speed + "x" : s.speed;
  gd.$("meta").textContent = s.playbook + ", seed " + s.seed + ", speed " + speed;
  gd.$("main").hidden = false;
  if (!team.catalogue) { team.catalogue = st.catalogue; makeCatalogue(st.catalogue); makeNoteForm(); }
  chart(st);
  renderScore(st.score);
  if (s.state === "ended" && !gd.over) over(st.score);
  list("alerts", st.alarms.length ? st.alarms : ["none firing"],
       (a) => gd.el("li", a, st.alarms.length ? "alert" : "muted"));
  list("actions", st.actions.slice().reverse(), (a) => actionItem(a, s.clock));
  list("messages", st.messages.slice().reverse(), (m) => gd.el("li", m.clock + "  " + m.text));
  list("hints", st.hints.length ? st.hints.slice().reverse() : [null],
       (h) => h ? gd.el("li", h.clock + "  " + h.text, "hint") : gd.el("li", "none released", "muted"));
  list("logs", st.logs.slice(-2).reverse(), logItem);
  const feed = gd.$("feed");
  for (const e of st.feed) {
    if (e.n !== team.feed.length) continue;  // had it already
    team.feed.push(e);
    const li = gd.el("li", e.clock + "  " + e.text, FEED_CLASS[e.kind] || "");
    li.dataset.n = String(e.n);
    feed.insertBefore(li, feed.firstChild);
  }
}

// -- the connection --------------------------------------------------------------------------------
gd.$("who").value = sessionStorage.getItem("gameday-who") || "";
gd.$("who").addEventListener("change", () => sessionStorage.setItem("gameday-who", gd.$("who").value.trim()));

const conn = gd.rolePage("team", (token) => ({
  id: gd.newId(), op: "hello", token: token, since: team.feed.length, series_since: team.xs.length,
  args: {team: team.name, by: gd.$("who").value.trim()}}), "state", render, answered, {
  wrong: "This link's token does not open team " + team.name + "'s console. Ask the facilitator for your team's link.",
  other: "This token is not a team's; it opens another page.",
  none: "This link has no token. Ask the facilitator for your team's link.",
  lost: "connection lost, reconnecting (nothing is lost meanwhile)"}, team.results);
