// The candle chart of one archived stream: reads the bars from the admin
// listener (chart/history, the same JSON as /api/v1/history) and draws
// them as SVG. No library, nothing from another origin.
"use strict";
(function () {
  const NS = "http://www.w3.org/2000/svg";
  const W = 1200, H = 520, L = 90, R = 12, T = 12, B = 34;
  const RES = { "1m": 60, "5m": 300, "15m": 900, "30m": 1800, "1h": 3600, "4h": 14400, "1d": 86400 };
  const q = new URLSearchParams(location.search);
  const state = {
    network: q.get("network") || "",
    feedID: q.get("feedID") || "",
    resolution: RES[q.get("resolution")] ? q.get("resolution") : "1m",
    span: parseInt(q.get("span"), 10) || 21600,
    to: parseInt(q.get("to"), 10) || 0, // 0: now
    field: q.get("field") || "",
  };
  const $ = (id) => document.getElementById(id);
  const svg = $("chart");

  function el(name, attrs, parent) {
    const e = document.createElementNS(NS, name);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function utc(t) {
    return new Date(t * 1000).toISOString().replace("T", " ").replace(/\.000Z$/, "");
  }
  function fmt(v) {
    return Math.abs(v) >= 1000 ? v.toFixed(2) : Number(v.toPrecision(8)).toString();
  }

  function sync() {
    $("resolution").value = state.resolution;
    const span = $("span");
    if (!Array.from(span.options).some((o) => o.value === String(state.span))) {
      const o = document.createElement("option"); // a span the link chose
      o.value = String(state.span);
      o.textContent = state.span + " s";
      span.appendChild(o);
    }
    span.value = String(state.span);
    $("field").value = state.field;
    const p = new URLSearchParams({ network: state.network, feedID: state.feedID, resolution: state.resolution, span: String(state.span) });
    if (state.to) p.set("to", String(state.to));
    if (state.field) p.set("field", state.field);
    history.replaceState(null, "", "chart?" + p.toString());
  }

  async function load() {
    sync();
    const res = RES[state.resolution];
    const to = state.to || Math.floor(Date.now() / 1000);
    const from = Math.max(0, to - state.span + 1);
    $("title").textContent = "Candles of " + state.feedID + " (" + state.network + ")";
    $("error").hidden = true;
    svg.dataset.state = "loading";
    $("info").textContent = "Loading…";
    const p = new URLSearchParams({ network: state.network, feedID: state.feedID, resolution: state.resolution, from: String(from), to: String(to) });
    if (state.field) p.set("field", state.field);
    let body, pages = "0";
    try {
      const r = await fetch("chart/history?" + p.toString(), { cache: "no-store", credentials: "same-origin" });
      body = await r.json();
      pages = r.headers.get("X-Streamgate-Fill-Pages") || "0";
      if (!r.ok) throw new Error(body.message || body.error || r.statusText);
    } catch (e) {
      $("error").textContent = "The bars could not be read: " + e.message;
      $("error").hidden = false;
      $("info").textContent = "";
      svg.replaceChildren();
      svg.dataset.state = "error";
      return;
    }
    const bars = [];
    if (body.s === "ok") {
      for (let i = 0; i < body.t.length; i++) {
        bars.push({ t: body.t[i], o: Number(body.o[i]), h: Number(body.h[i]), l: Number(body.l[i]), c: Number(body.c[i]) });
      }
    }
    const missing = body.missing || [];
    draw(bars, missing, Math.ceil(from / res) * res, Math.floor(to / res) * res + res, res);
    $("info").textContent = bars.length + " bars from " + utc(from) + " to " + utc(to) + " UTC · " +
      (missing.length ? missing.length + " spans missing" : "nothing missing") +
      (pages !== "0" ? " · " + pages + " pages filled from the upstream by this request" : "") +
      (body.s === "no_data" && body.nextTime ? " · the latest older bar opens at " + utc(body.nextTime) : "");
  }

  function draw(bars, missing, t0, t1, res) {
    svg.replaceChildren();
    const pw = W - L - R, ph = H - T - B;
    const x = (t) => L + ((t - t0) / (t1 - t0)) * pw;
    let lo = Infinity, hi = -Infinity;
    for (const b of bars) { lo = Math.min(lo, b.l); hi = Math.max(hi, b.h); }
    if (!bars.length) { lo = 0; hi = 1; }
    if (lo === hi) { lo -= 1; hi += 1; }
    const pad = (hi - lo) * 0.04;
    lo -= pad; hi += pad;
    const y = (v) => T + ((hi - v) / (hi - lo)) * ph;
    const axis = el("g", { class: "axis" }, svg);
    for (let i = 0; i <= 5; i++) {
      const v = lo + ((hi - lo) * i) / 5, yy = y(v);
      el("line", { x1: L, x2: W - R, y1: yy, y2: yy }, axis);
      el("text", { x: L - 6, y: yy + 4, "text-anchor": "end" }, axis).textContent = fmt(v);
    }
    for (let i = 0; i <= 4; i++) {
      const t = t0 + ((t1 - t0) * i) / 4;
      el("text", { x: x(t), y: H - 10, "text-anchor": i === 0 ? "start" : i === 4 ? "end" : "middle" }, axis).textContent = utc(Math.round(t));
    }
    for (const m of missing) {
      const a = Math.max(m.from, t0), z = Math.min(m.to + 1, t1);
      if (z <= a) continue;
      el("rect", { class: "missing", x: x(a), y: T, width: Math.max(1, x(z) - x(a)), height: ph, "data-from": m.from, "data-to": m.to }, svg);
    }
    const bw = Math.max(1, (pw * res) / (t1 - t0) * 0.7);
    const g = el("g", { id: "bars" }, svg);
    for (const b of bars) {
      const cx = x(b.t + res / 2);
      const bar = el("g", { class: "bar " + (b.c >= b.o ? "up" : "down"), "data-t": b.t, "data-o": b.o, "data-h": b.h, "data-l": b.l, "data-c": b.c }, g);
      el("title", {}, bar).textContent = utc(b.t) + "  O " + b.o + "  H " + b.h + "  L " + b.l + "  C " + b.c;
      el("line", { class: "wick", x1: cx, x2: cx, y1: y(b.h), y2: y(b.l) }, bar);
      const top = y(Math.max(b.o, b.c)), bottom = y(Math.min(b.o, b.c));
      el("rect", { class: "body", x: cx - bw / 2, y: top, width: bw, height: Math.max(1, bottom - top) }, bar);
    }
    svg.dataset.bars = String(bars.length);
    svg.dataset.state = "drawn";
  }

  $("resolution").addEventListener("change", (e) => { state.resolution = e.target.value; load(); });
  $("span").addEventListener("change", (e) => { state.span = parseInt(e.target.value, 10); load(); });
  $("field").addEventListener("change", (e) => { state.field = e.target.value.trim(); load(); });
  $("older").addEventListener("click", () => {
    state.to = (state.to || Math.floor(Date.now() / 1000)) - state.span;
    load();
  });
  $("newer").addEventListener("click", () => {
    const now = Math.floor(Date.now() / 1000);
    state.to = state.to && state.to + state.span < now ? state.to + state.span : 0;
    load();
  });
  $("latest").addEventListener("click", () => { state.to = 0; load(); });
  $("controls").addEventListener("submit", (e) => e.preventDefault());
  load();
})();
