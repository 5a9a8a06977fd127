// app.js - the operator console: live calls, routing, latency, workers and
// cache from the router's SSE feed (GET /v1/console/events), a call's whole
// trace (GET /v1/calls/ID) and the operator's correction (POST .../feedback).
//
// The API key: taken once from the page's #key=... fragment (never sent to
// the server, removed from the address bar at once) or typed into the form;
// kept in sessionStorage (this tab only) and sent as "Authorization: Bearer"
// on fetch(). The feed is read with fetch() streaming rather than
// EventSource, which cannot send headers - so the key never appears in a URL.
"use strict";

const MAX_CALLS = 200;
const S = { key: null, calls: [], byId: new Map(), state: null, dirty: false, openId: null, conn: null };
const $ = (sel) => document.querySelector(sel);

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k === "text") e.textContent = v; else e.setAttribute(k, v);
  }
  for (const k of kids) if (k != null) e.append(k.nodeType ? k : String(k));
  return e;
}
const fmt = (ms) => ms == null ? "–" : ms < 10 ? ms.toFixed(1) : Math.round(ms).toString();
const pct = (x) => x == null ? "–" : (100 * x).toFixed(x < 0.1 ? 1 : 0) + "%";
const kb = (n) => n == null ? "–" : n > 1048576 ? (n / 1048576).toFixed(1) + " GB" : n > 1024 ? (n / 1024).toFixed(0) + " MB" : n + " kB";
const bytes = (n) => n == null ? "–" : kb(Math.round(n / 1024));

function takeKey() {
  const m = location.hash.match(/[#&]key=([^&]*)/);
  if (m) {
    sessionStorage.setItem("sbkey", decodeURIComponent(m[1]));
    history.replaceState(null, "", location.pathname);
  }
  S.key = sessionStorage.getItem("sbkey");
}

function headers(extra) {
  const h = Object.assign({}, extra || {});
  if (S.key) h.Authorization = "Bearer " + S.key;
  return h;
}

function setConn(state, text) {
  const c = $("#conn");
  c.className = "pill " + (state === "live" ? "live" : "off");
  c.textContent = text;
}

// ------------------------------------------------------------------ feed

async function feed() {
  for (;;) {
    try {
      const ctl = new AbortController();
      S.conn = ctl;
      const res = await fetch("/v1/console/events", { headers: headers(), signal: ctl.signal, cache: "no-store" });
      if (res.status === 401) { askKey(); return; }
      if (!res.ok || !res.body) throw new Error("HTTP " + res.status);
      setConn("live", "live");
      const reader = res.body.getReader();
      const dec = new TextDecoder();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let i;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          const data = block.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
          if (data && data !== "[DONE]") onEvent(JSON.parse(data));
        }
      }
    } catch (e) {
      console.warn("console feed:", e);
    }
    setConn("off", "reconnecting");
    await new Promise((r) => setTimeout(r, 1000));
  }
}

function addCall(c, fresh) {
  if (S.byId.has(c.id)) {
    const old = S.byId.get(c.id);
    S.calls[S.calls.indexOf(old)] = c;
  } else {
    S.calls.unshift(c);
    if (S.calls.length > MAX_CALLS) S.byId.delete(S.calls.pop().id);
  }
  c._fresh = fresh;
  S.byId.set(c.id, c);
}

function onEvent(ev) {
  if (ev.type === "hello") {
    S.calls = []; S.byId.clear();
    for (const c of ev.calls.slice().reverse()) addCall(c, false);
    S.state = ev.state; S.stateAt = Date.now();
  } else if (ev.type === "call") {
    addCall(ev, true);
  } else if (ev.type === "feedback") {
    const c = S.byId.get(ev.id);
    if (c) c.feedback = ev.intent;
  } else if (ev.type === "state") {
    S.state = ev; S.stateAt = Date.now();
  }
  // Calls render at once (the console promises them within a second);
  // bursts coalesce into one render per frame.
  if (!S.dirty) { S.dirty = true; requestAnimationFrame(render); }
}

// ---------------------------------------------------------------- render

function render() {
  S.dirty = false;
  renderCalls();
  if (S.state) { renderRouter(); renderRouting(); renderLatency(); renderWorkers(); renderCache(); }
}

function stageChips(stages) {
  const td = el("td");
  for (const s of stages || [])
    td.append(el("span", { class: "chip " + (s.status || ""), title: s.status }, s.name + " " + (s.status === "skipped" ? "–" : fmt(s.ms))));
  return td;
}

function renderCalls() {
  const tb = $("#calls tbody");
  const rows = [];
  for (const c of S.calls) {
    const t = new Date(c.time * 1000).toLocaleTimeString();
    const intent = el("td");
    if (c.intent) {
      intent.append(el("b", {}, c.intent));
      if (c.confidence != null) {
        const bar = el("span", { class: "conf" + (c.fallback || c.confidence < 0.5 ? " low" : ""), title: pct(c.confidence) });
        const fill = el("i"); fill.style.width = Math.round(100 * c.confidence) + "%";
        bar.append(fill); intent.append(bar, " " + pct(c.confidence));
      }
      if (c.fallback) intent.append(el("span", { class: "warn" }, " fallback"));
      if (c.feedback) intent.append(el("div", { class: "fb" }, "marked: " + c.feedback));
    } else intent.append("–");
    const outcome = c.status < 400 ? el("span", { class: "ok" }, "ok") : el("span", { class: "bad", title: c.error || "" }, String(c.status));
    const tr = el("tr", { class: "call" + (c._fresh ? " new" : ""), "data-id": c.id },
      el("td", {}, t), el("td", { class: "caller", title: c.caller }, c.caller), intent, stageChips(c.stages),
      el("td", { class: c.cache === "hit" ? "hit" : "" }, c.cache), el("td", {}, outcome), el("td", { class: "num" }, fmt(c.ms)));
    c._fresh = false;
    rows.push(tr);
  }
  tb.replaceChildren(...rows);
  $("#nocalls").hidden = S.calls.length > 0;
  $("#ncalls").textContent = S.calls.length ? "last " + S.calls.length : "";
}

function renderRouter() {
  const r = S.state.router;
  $("#router").textContent = `router pid ${r.pid} · ${kb(r.rss_kb)} · up ${Math.round(S.state.uptime_s + (Date.now() - S.stateAt) / 1000)} s · ` +
    `${r.in_flight} in flight · caller text ${r.caller_text}`;
}

function renderRouting() {
  const g = S.state.routing, box = el("div");
  const max = Math.max(1, ...Object.values(g.intents));
  for (const [name, n] of Object.entries(g.intents).sort((a, b) => b[1] - a[1])) {
    const fill = el("i"); fill.style.width = (100 * n / max) + "%";
    box.append(el("div", { class: "bar" }, el("span", { class: "name", title: name }, name), el("span", { class: "track" }, fill), el("span", { class: "n" }, n)));
  }
  const rate = g.calls ? g.fallback / g.calls : null;
  box.append(el("p", {}, `${g.calls} calls · fallback / low confidence `, el("b", { class: rate > 0.2 ? "warn" : "" }, pct(rate))));
  if (g.confusion.length) {
    const t = el("table", {}, el("tr", {}, el("th", {}, "routed to"), el("th", {}, "operator says"), el("th", { class: "num" }, "n")));
    for (const p of g.confusion.slice(0, 8)) t.append(el("tr", {}, el("td", {}, p.predicted || "–"), el("td", {}, p.corrected), el("td", { class: "num" }, p.n)));
    box.append(el("div", { class: "muted" }, "corrections"), t);
  }
  $("#routing").replaceChildren(box);
}

function pctRow(name, p) {
  return el("tr", {}, el("td", {}, name), el("td", { class: "num" }, fmt(p.p50)), el("td", { class: "num" }, fmt(p.p95)),
    el("td", { class: "num" }, fmt(p.p99)), el("td", { class: "num muted" }, p.n));
}

function renderLatency() {
  const l = S.state.latency;
  const t = el("table", {}, el("tr", {}, el("th", {}, ""), el("th", { class: "num" }, "p50"), el("th", { class: "num" }, "p95"),
    el("th", { class: "num" }, "p99"), el("th", { class: "num" }, "n")));
  t.append(pctRow("end to end", l.end_to_end), pctRow("first token", l.ttft));
  for (const [k, p] of Object.entries(l.stages)) t.append(pctRow(k, p));
  $("#latency").replaceChildren(t);
}

function renderWorkers() {
  const t = el("table", {}, el("tr", {}, ...["model", "state", "pid", "restarts", "queue", "RSS", "tok/s", "KV hit"].map((h) => el("th", {}, h))));
  for (const w of S.state.workers) {
    const cls = w.state === "idle" || w.state === "busy" || w.state === "remote" ? "ok" : "bad";
    t.append(el("tr", {}, el("td", {}, w.model), el("td", { class: cls }, w.state), el("td", {}, w.pid ?? "–"),
      el("td", { class: w.restarts ? "warn" : "" }, w.restarts), el("td", {}, `${w.queued} + ${w.in_flight}`),
      el("td", {}, kb(w.rss_kb)), el("td", {}, w.tokens_per_s ? w.tokens_per_s.toFixed(1) : "–"), el("td", {}, pct(w.kv_reuse))));
  }
  $("#workers").replaceChildren(t);
}

function renderCache() {
  const c = S.state.cache;
  if (!c.enabled) { $("#cache").replaceChildren(el("p", { class: "muted" }, "off (no cache: section)")); return; }
  const dl = el("dl", { class: "kv" });
  const add = (k, v) => dl.append(el("dt", {}, k), el("dd", {}, v));
  add("hit rate", pct(c.hit_rate) + ` (${c.hits} hits / ${c.misses} misses)`);
  add("entries", c.entries ?? "–");
  add("size", `${bytes(c.bytes)} of ${bytes(c.max_bytes)}`);
  const s = c.sync;
  add("cloud sync", s && s.url ? `${s.url} · cursor ${s.cursor} · ${s.dirty_entries} to send${s.pending ? " · retry pending" : ""}` : "off");
  $("#cache").replaceChildren(dl);
}

// ----------------------------------------------------------------- hand-offs

// Polled, not fed: a package is delivered on the router's delivery thread,
// which the feed does not hear about. The list never holds a package.
async function loadHandoffs() {
  const res = await fetch("/v1/console/handoffs", { headers: headers(), cache: "no-store" }).catch(() => null);
  if (!res || !res.ok) return;
  const j = await res.json();
  const box = $("#handoffs");
  if (!j.enabled) { box.replaceChildren(el("p", { class: "muted" }, "no conversations (no pipeline keeps sessions)")); return; }
  if (!j.handoffs.length) { box.replaceChildren(el("p", { class: "muted" }, "none yet")); return; }
  const t = el("table", { id: "handofftable" }, el("tr", {}, ...["time", "session", "pipeline", "intent", "reason", "delivery"].map((h) => el("th", {}, h))));
  for (const h of j.handoffs) {
    const state = h.state === "delivered" ? `delivered (${h.attempts} attempt${h.attempts === 1 ? "" : "s"})`
      : h.state === "retrying" ? `retrying · ${h.attempts} failed` : "queued";
    t.append(el("tr", { class: "handoff" }, el("td", {}, new Date(h.created * 1000).toLocaleTimeString()),
      el("td", { title: h.session }, h.session.slice(0, 8)), el("td", {}, h.pipeline || "–"), el("td", {}, h.intent || "–"),
      el("td", {}, h.reason || "–"),
      el("td", { class: h.state === "delivered" ? "ok" : h.state === "retrying" ? "bad" : "", title: h.last_error || h.url }, state)));
  }
  box.replaceChildren(t);
}

// ----------------------------------------------------------------- trace

async function openTrace(id) {
  S.openId = id;
  const body = $("#tracebody");
  body.replaceChildren(el("p", { class: "muted" }, "loading " + id + " …"));
  $("#trace").hidden = false;
  const res = await fetch("/v1/calls/" + encodeURIComponent(id), { headers: headers() });
  const t = await res.json();
  if (!res.ok) { body.replaceChildren(el("p", { class: "bad" }, t.error ? t.error.message : "HTTP " + res.status)); return; }
  const r = t.result || {};
  const head = el("div", {},
    el("h3", {}, `Call ${t.id}`),
    el("div", { class: "muted" }, `${new Date(t.time * 1000).toLocaleString()} · pipeline ${t.pipeline} · via ${t.source} · cache ${t.cache} · ` +
      `status ${t.status} · ${fmt(t.ms)} ms` + (r.ttft_ms != null ? ` · first token ${fmt(r.ttft_ms)} ms` : "")),
    el("p", {}, el("b", {}, "Caller: "), t.caller),
    el("p", {}, el("b", {}, "Intent: "), r.intent || "–", r.confidence != null ? ` (${pct(r.confidence)})` : "", r.fallback ? " — fallback" : ""));
  if (t.error) head.append(el("p", { class: "bad" }, t.error));
  const parts = [head];
  const labels = Object.keys(r.probabilities || {});
  if (labels.length) {
    const probs = Object.entries(r.probabilities).sort((a, b) => b[1] - a[1]).map(([k, v]) => `${k} ${pct(v)}`).join(" · ");
    parts.push(el("div", { class: "muted" }, probs));
    const sel = el("select", { id: "fbintent" });
    for (const l of labels) { const o = el("option", { value: l }, l); if (l === (t.feedback || r.intent)) o.selected = true; sel.append(o); }
    const btn = el("button", { id: "fbsend", type: "button" }, "Mark correct intent");
    const note = el("span", { class: "muted", id: "fbnote" }, t.feedback ? "marked: " + t.feedback : "");
    btn.onclick = () => sendFeedback(t.id, sel.value, note);
    parts.push(el("div", { class: "feedback" }, "Correct intent:", sel, btn, note));
  }
  for (const s of r.stages || []) {
    const box = el("div", { class: "stage" },
      el("h4", {}, s.name, el("span", { class: "chip " + s.status }, s.status), el("span", { class: "muted" }, `${s.kind}${s.model ? " · " + s.model : ""} · ${fmt(s.ms)} ms`)));
    if (s.input != null) box.append(el("div", { class: "muted" }, "input"), el("pre", {}, s.input));
    if (s.output) box.append(el("div", { class: "muted" }, "output"), el("pre", {}, s.output));
    if (s.json) box.append(el("div", { class: "muted" }, "json"), el("pre", {}, JSON.stringify(s.json, null, 2)));
    if (s.error) box.append(el("div", { class: "bad" }, s.error));
    parts.push(box);
  }
  if (r.output) parts.push(el("div", { class: "muted" }, "answer"), el("pre", {}, r.output));
  body.replaceChildren(...parts);
}

async function sendFeedback(id, intent, note) {
  const res = await fetch("/v1/calls/" + encodeURIComponent(id) + "/feedback",
    { method: "POST", headers: headers({ "Content-Type": "application/json" }), body: JSON.stringify({ intent }) });
  const j = await res.json().catch(() => ({}));
  note.textContent = res.ok ? "marked: " + intent : (j.error ? j.error.message : "HTTP " + res.status);
}

// ----------------------------------------------------------------- start

function askKey() {
  setConn("off", "API key needed");
  $("#keyform").hidden = false;
  $("#keyinput").focus();
}

function main() {
  takeKey();
  $("#keyform").addEventListener("submit", (e) => {
    e.preventDefault();
    S.key = $("#keyinput").value.trim();
    sessionStorage.setItem("sbkey", S.key);
    $("#keyform").hidden = true;
    feed();
  });
  $("#calls tbody").addEventListener("click", (e) => {
    const tr = e.target.closest("tr.call");
    if (tr) openTrace(tr.dataset.id);
  });
  $("#closetrace").onclick = () => { $("#trace").hidden = true; S.openId = null; };
  document.addEventListener("keydown", (e) => { if (e.key === "Escape") $("#closetrace").click(); });
  // The router sends a snapshot only when something changed: the uptime
  // keeps counting here.
  setInterval(() => { if (S.state) renderRouter(); }, 1000);
  setInterval(loadHandoffs, 5000);
  feed();
  loadHandoffs();
}
main();
