"use strict";
// The facilitator's page: the session's controls and every team at a glance, over the
// same requests as `gameday facilitate` (see orchestrator/live/web.py).
const fac = {overview: null, faults: null, teams: [], results: {}, report: null};
window.gamedayFacilitator = fac;

function send(op, args, result, button) {
  if (button) button.disabled = true;
  result.textContent = "sending";
  result.className = "result";
  const id = conn.request(op, args);
  fac.results[id] = {result, button, op};
}

function answered(msg) {
  if (fac.report && fac.report.answered(msg)) return;
  const r = fac.results[msg.id];
  if (!r) return;
  if (gd.unanswered(msg)) { r.result.textContent = "no answer from the session yet; asking again"; return; }
  delete fac.results[msg.id];
  if (r.button) r.button.disabled = false;
  r.result.textContent = msg.ok ? r.op + ": done" : r.op + " refused: " + msg.error.message;
  r.result.className = msg.ok ? "result" : "result error";
}

function teamBoxes(container) {
  container.replaceChildren();
  for (const team of fac.teams) {
    const label = gd.el("label", team);
    const box = gd.el("input");
    box.type = "checkbox"; box.checked = true; box.value = team;
    label.prepend(box);
    container.appendChild(label);
  }
}

function chosenTeams(form) {
  return Array.from(form.querySelectorAll(".teams input:checked")).map((b) => b.value);
}

function showFault() {
  const f = fac.faults.find((x) => x.name === gd.$("fault").value);
  gd.$("fault-description").textContent = f ? f.description : "";
  const box = gd.$("fault-params");
  box.replaceChildren();
  for (const [name, dflt] of Object.entries((f && f.params) || {})) box.appendChild(gd.paramInput(name, dflt));
}

function setUp(ov) {
  fac.faults = ov.faults;
  fac.teams = ov.session.teams;
  const select = gd.$("fault");
  for (const f of ov.faults) select.appendChild(gd.el("option", f.name)).value = f.name;
  select.addEventListener("change", showFault);
  showFault();
  for (const c of document.querySelectorAll(".teams")) teamBoxes(c);
  const out = gd.$("control-result");
  for (const op of ["start", "pause", "resume"]) gd.$(op).addEventListener("click", (ev) => send(op, {}, out, ev.target));
  gd.$("set-speed").addEventListener("click", (ev) => send("speed", {speed: Number(gd.$("speed").value)}, out, ev.target));
  gd.$("ranks").addEventListener("change", (ev) => send("ranks", {shown: ev.target.checked}, out));
  const end = gd.$("end");
  end.addEventListener("click", () => {  // twice, so that one slip of the hand does not end a game day
    if (end.dataset.armed) { send("end", {}, out, end); disarm(); return; }
    end.dataset.armed = "1";
    end.textContent = "Really end it? Click again";
    fac.disarming = setTimeout(disarm, END_ARMED_MS);  // (a second click much later is not the same intent)
  });
  gd.$("inject").addEventListener("submit", (ev) => {
    ev.preventDefault();
    if (!chosenTeams(ev.target).length) { ev.target.querySelector(".result").textContent = "tick at least one team"; return; }
    send("inject", {fault: select.value, params: gd.readParams(gd.$("fault-params")), teams: chosenTeams(ev.target)},
         ev.target.querySelector(".result"), ev.target.querySelector("button"));
  });
  const hints = gd.$("hint-name");  // the playbook's hints, or one written here
  for (const h of ov.hints || []) hints.appendChild(gd.el("option", h.name)).value = h.name;
  const shown = () => {
    const h = (ov.hints || []).find((x) => x.name === hints.value);
    gd.$("hint-text-shown").textContent = h ? h.text : "";
    gd.$("hint-text").disabled = !!h;
  };
  hints.addEventListener("change", shown);
  shown();
  gd.$("hint").addEventListener("submit", (ev) => {
    ev.preventDefault();
    if (!chosenTeams(ev.target).length) { ev.target.querySelector(".result").textContent = "tick at least one team"; return; }
    const args = hints.value ? {name: hints.value} : {text: gd.$("hint-text").value};
    send("hint", {...args, teams: chosenTeams(ev.target)}, ev.target.querySelector(".result"),
         ev.target.querySelector("button"));
  });
  gd.$("message").addEventListener("submit", (ev) => {
    ev.preventDefault();
    if (!chosenTeams(ev.target).length) { ev.target.querySelector(".result").textContent = "tick at least one team"; return; }
    send("message", {text: gd.$("message-text").value, teams: chosenTeams(ev.target)},
         ev.target.querySelector(".result"), ev.target.querySelector("button"));
  });
}

const END_ARMED_MS = 5000;  // how long the End button waits for its second click

function disarm() {
  const end = gd.$("end");
  clearTimeout(fac.disarming);
  delete end.dataset.armed;
  end.textContent = "End the game day";
}

function render(ov) {
  if (!fac.overview) setUp(ov);
  fac.overview = ov;
  const s = ov.session;
  gd.$("clock").textContent = s.clock + " / " + s.end_clock;
  gd.$("state").textContent = s.state;
  gd.$("state").className = s.state;
  const speed = typeof s.speed === "number" ? s.speed + "x" : s.speed;
  gd.$("meta").textContent = s.playbook + ", seed " + s.seed + ", speed " + speed +
    (s.pace ? ", really " + Math.round(s.pace) + "x" : "");
  gd.$("main").hidden = false;
  if (s.state === "ended") { disarm(); gd.$("end").disabled = true; }  // (ended, by the facilitator or the clock)
  if (s.state === "ended" && !fac.report) {
    fac.report = new gd.Report(conn, gd.$("report"), "the session report");
    fac.report.ask();
  }
  gd.$("ranks").checked = !!s.ranks_shown;
  const history = gd.el("ol", null, "history");
  history.id = "history";
  history.reversed = true;
  for (const c of (ov.controls || []).slice().reverse()) {
    const li = gd.el("li", c.clock + "  " + c.control + (c.detail ? ": " + c.detail : ""));
    li.dataset.control = c.control;
    history.appendChild(li);
  }
  gd.$("history").replaceWith(history);
  const body = gd.el("tbody");
  body.id = "rows";
  for (const t of ov.teams) {
    const tr = gd.el("tr");
    tr.dataset.team = t.team;
    const cells = [[String(t.rank), "num"], [t.team, "team"], [t.loop], [t.backlog],
                   [typeof t.impact === "number" ? t.impact.toFixed(1) : "-", "num"], [String(t.actions), "num"],
                   [t.in_flight.join(", ") || "-"], [t.alarms.join(", ") || "-", t.alarms.length ? "alert" : ""],
                   [String((ov.consoles || {})[t.team] || 0), "num"], [t.last_feed || "-", "latest"]];
    for (const [text, cls] of cells) {
      const td = gd.el("td", text, cls || undefined);
      if (cls === "latest") td.title = text;  // (cut to its column; the whole of it on hover)
      tr.appendChild(td);
    }
    body.appendChild(tr);
  }
  gd.$("rows").replaceWith(body);
}

const conn = gd.rolePage("facilitator", (token) => ({id: gd.newId(), op: "hello", token: token,
                                                     args: {by: "facilitator page"}}), "overview", render, answered, {
  wrong: "This link's token does not open the facilitator's page.",
  other: "This token is not the facilitator's.",
  none: "This link has no token: use the facilitator's link `gameday serve` printed.",
  lost: "connection lost, reconnecting"}, fac.results);
