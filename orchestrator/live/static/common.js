"use strict";
// What every page of a live game day shares: building elements (data goes in through
// textContent only, never parsed as HTML), the simulated clock, and a WebSocket to the
// server that reconnects by itself.
const gd = {};

gd.$ = (id) => document.getElementById(id);

// Whether the page has seen its game day end: its server closing then is the end, not a cut.
gd.over = false;

gd.el = function (tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = text;
  if (cls) e.className = cls;
  return e;
};

// Seconds after midnight as HH:MM (or HH:MM:SS).
gd.clock = function (s, withSeconds) {
  const t = Math.round(s);
  const h = Math.floor(t / 3600) % 24, m = Math.floor(t / 60) % 60, sec = t % 60;
  const two = (n) => String(n).padStart(2, "0");
  return two(h) + ":" + two(m) + (withSeconds ? ":" + two(sec) : "");
};

// A chart's clock axis: seconds shown while it spans less than a quarter of an hour.
gd.clockAxis = (u, vals) => vals.map((v) => gd.clock(v, u.scales.x.max - u.scales.x.min < 900));

// A reply that says the session has not answered yet: the request may still run, once.
gd.unanswered = (msg) => !msg.ok && msg.error && msg.error.code === "unreachable";

gd.newId = () => (crypto.randomUUID ? crypto.randomUUID() : String(Date.now()) + Math.random().toString(16).slice(2));

// The page's token: from the link's fragment (kept for reloads in this tab only, and
// taken out of the address bar), or from an earlier load of this tab.
// A link with another token pasted into this tab: load the page again with it.
window.addEventListener("hashchange", () => location.reload());

// A parameter of a mitigation or a fault as a form field, filled in with its default.
gd.paramInput = function (name, dflt) {
  const label = gd.el("label", name);
  const input = gd.el("input");
  input.name = name;
  if (typeof dflt === "boolean") { input.type = "checkbox"; input.checked = dflt; }
  else if (typeof dflt === "number") { input.type = "number"; input.step = "any"; input.value = String(dflt); }
  else { input.type = "text"; input.value = dflt === null || dflt === undefined ? "" : String(dflt); }
  input.dataset.kind = typeof dflt;
  label.appendChild(input);
  return label;
};

// The parameters filled in under ``root``; a field left empty is left out (its default applies).
gd.readParams = function (root) {
  const params = {};
  for (const input of root.querySelectorAll("input[name]")) {
    const kind = input.dataset.kind;
    if (kind === "boolean") params[input.name] = input.checked;
    else if (input.value.trim() === "") continue;
    else params[input.name] = kind === "number" ? Number(input.value) : input.value;
  }
  return params;
};

gd.token = function () {
  let fromLink = location.hash.slice(1);
  try { fromLink = decodeURIComponent(fromLink); } catch (e) { /* not percent-encoded: as it is */ }
  if (fromLink) {
    sessionStorage.setItem("gameday-token:" + location.pathname, fromLink);
    history.replaceState(null, "", location.pathname);
  }
  return sessionStorage.getItem("gameday-token:" + location.pathname) || "";
};

// A connection to the server's gateway. hello() gives the first message (sent on every
// (re)connection); onMessage gets every message; onState(up) is told when it connects
// and when it loses the connection. Requests not yet answered are sent again, with the
// same id, when it reconnects: the server runs each id once.
gd.Connection = class {
  constructor(hello, onMessage, onState) {
    this.hello = hello; this.onMessage = onMessage; this.onState = onState;
    this.pending = new Map();  // id -> request, sent and not yet answered
    this.denied = false; this.delay = 250; this.ws = null;
    this.connect();
  }
  connect() {
    const ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws");
    this.ws = ws;
    ws.onopen = () => {
      this.delay = 250;
      ws.send(JSON.stringify(this.hello()));
      for (const req of this.pending.values()) ws.send(JSON.stringify(req));
      this.onState(true);
    };
    ws.onmessage = (ev) => {
      const msg = JSON.parse(ev.data);
      if (msg.type === "reply" && msg.id && gd.unanswered(msg)) {
        // no answer yet (the session is busy, or its server restarting): ask again, with the same id
        setTimeout(() => {
          const req = this.pending.get(msg.id);
          if (req && this.ws === ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(req));
        }, 2000);
      } else if (msg.type === "reply" && msg.id) {
        this.pending.delete(msg.id);
      }
      this.onMessage(msg);
    };
    ws.onclose = () => {
      if (this.ws !== ws) return;
      this.onState(false);
      if (!this.denied && !gd.over) {  // (a game day over: its server has closed for good)
        setTimeout(() => this.connect(), this.delay);
        this.delay = Math.min(this.delay * 2, 4000);
      }
    };
  }
  request(op, args) {
    const req = {id: gd.newId(), op: op, args: args || {}};
    this.pending.set(req.id, req);
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(req));
    return req.id;
  }
  deny() { this.denied = true; if (this.ws) this.ws.close(); }
};

// A report written as the game day ends (a team's page: its own; the facilitator's: the
// session's), served by the page's server under the page's token: asked for until it is
// written, then linked in ``el``. ``answered(msg)`` takes the replies to its requests (true)
// and leaves the others.
gd.Report = class {
  constructor(conn, el, what) { this.conn = conn; this.el = el; this.what = what; this.asked = null; }
  ask() { this.asked = this.conn.request("report"); }
  answered(msg) {
    if (msg.id !== this.asked) return false;
    const el = this.el;
    el.hidden = false;
    el.textContent = "";
    const r = msg.ok ? msg.result : {state: "none", error: msg.error.message};
    if (r.state === "ready") {
      const a = gd.el("a", "Open " + this.what);
      a.href = r.url; a.target = "_blank"; a.rel = "noopener";
      el.appendChild(a);
    } else if (r.state === "failed" || r.state === "none") {
      el.textContent = (r.state === "failed" ? "The report could not be written: " : "No report: ") + r.error;
    } else {
      el.textContent = this.what.charAt(0).toUpperCase() + this.what.slice(1) + " is being written ...";
      setTimeout(() => this.ask(), 1000);
    }
    return true;
  }
};

// The server's refusals of a page that it will take later (the page tries again by itself): said
// as refused, with the server's reason, not as a lost connection.
const TRY_AGAIN = ["too_many_pages", "rate_limited"];

// The connection of a page for one role: pushed messages of type ``push`` go to
// ``render``, replies to ``answered``. A token refused, or another role's, closes the
// page with ``texts.wrong`` or ``texts.other`` (and is not tried again); no token at all,
// with ``texts.none``; ``texts.lost`` says the connection is gone for now. ``waiting``: the
// page's forms waiting for an answer ({result: element} by request id), each told when the
// connection goes and comes back.
gd.rolePage = function (role, hello, push, render, answered, texts, waiting) {
  const token = gd.token();
  let conn = null;
  let refused = null;  // why the server turned this page away for now (it tries again by itself)
  const refuse = (text) => {
    conn.deny();
    sessionStorage.removeItem("gameday-token:" + location.pathname);
    gd.$("main").remove();
    document.body.appendChild(gd.el("p", text, "denied error"));
    gd.$("state").textContent = "no access";
  };
  conn = new gd.Connection(
    () => hello(token),
    (msg) => {
      if (msg.type === push) { refused = null; render(msg.result); return; }
      if (msg.type !== "reply") return;
      if (!msg.ok && (msg.error.code === "unauthorized" || msg.error.code === "forbidden")) { refuse(texts.wrong); return; }
      if (!msg.ok && TRY_AGAIN.includes(msg.error.code)) refused = msg.error.message;
      if (msg.result && msg.result.role && msg.result.role !== role) { refuse(texts.other); return; }
      answered(msg);
    },
    (up) => {
      for (const form of Object.values(waiting || {})) {  // (sent again, with its id, once the connection is back)
        form.result.textContent = up ? "sending" : gd.over ? "not answered: the game day is over" :
          "waiting for the connection; sent again when it is back";
      }
      document.body.classList.toggle("lost", !up && !gd.over);
      gd.$("status").textContent = up ? "" : gd.over ? "the game day is over and its server has closed" :
        refused ? "refused: " + refused : texts.lost;
    });
  if (!token) refuse(texts.none);
  return conn;
};
