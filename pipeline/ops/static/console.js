// framewire's web console: reads its figures from /console/events (server-sent events, read with
// fetch so that the token goes in a header), long-polls each source's preview, adds and removes
// sources through the control API, and draws each source's lines and zones with their live counts
// over its preview, where the user draws new ones (draw.js). Plain JavaScript and canvas; no
// library, no build step.
"use strict";

const TOKEN_KEY = "framewire.token";
const RETRY_MS = 1000;
const ENDED = ["ended", "failed"];
const cards = new Map(); // source id -> {root, fields, charts, preview}
const history = new Map(); // source id -> [[time, fps, p50, p99], ...], the last HISTORY points
const HISTORY = 180;
let previewsOn = false;
let since = 0; // the newest chart point held: a new stream asks only for newer ones
let stream = null; // the AbortController of the event stream being read

function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

async function api(path, options = {}) {
  const headers = Object.assign({}, options.headers || {});
  const sent = token();
  if (sent) headers["Authorization"] = "Bearer " + sent;
  const response = await fetch(path, Object.assign({}, options, { headers, cache: "no-store" }));
  if (response.status === 401) {
    if (sent === token()) askToken(sent ? "that token was refused" : ""); // not an answer to an older token
    throw new Error("unauthorised");
  }
  return response;
}

function askToken(message) {
  document.getElementById("status").textContent = "waiting for the token (http.token)";
  document.getElementById("console").hidden = true;
  document.getElementById("token-form").hidden = false;
  document.getElementById("token-error").textContent = message;
  document.getElementById("token").focus();
}

function fmt(value, digits) { return value === null || value === undefined ? "-" : Number(value).toFixed(digits); }

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  for (const child of children) node.append(child);
  return node;
}

function makeCard(id) {
  const fields = {};
  const numbers = el("div", { class: "numbers" });
  for (const [key, label] of [["fps", "fps (last s)"], ["p50", "latency p50 ms"], ["p99", "latency p99 ms"],
                              ["frames", "frames"], ["dropped", "dropped"], ["reconnects", "reconnects"]]) {
    fields[key] = el("b", { "data-field": key }, "-");
    numbers.append(el("div", {}, el("span", {}, label), fields[key]));
  }
  fields.state = el("span", { class: "state" }, "");
  const remove = el("button", { type: "button", class: "remove" }, "Remove");
  remove.addEventListener("click", () => removeSource(id, card));
  const problem = el("div", { class: "problem" });
  const preview = el("img", { class: "preview", alt: "preview of " + id, hidden: "" });
  const panel = el("div", { class: "preview panel" }, "waiting for a frame");
  const fpsChart = el("canvas", { class: "chart-fps" });
  const latencyChart = el("canvas", { class: "chart-latency" });
  const charts = el("div", { class: "charts" },
    el("figure", {}, fpsChart, el("figcaption", {}, "fps")),
    el("figure", {}, latencyChart, el("figcaption", {}, "latency ms: p50 (blue), p99 (red)")));
  const root = el("article", { class: "source", "data-source": id },
    el("h2", {}, el("span", { class: "id" }, id), fields.state, remove), preview, panel, numbers, charts,
    problem);
  const card = { root, fields, remove, problem, preview, panel, fpsChart, latencyChart, frame: 0, watching: false,
                 gone: false, ended: false };
  document.getElementById("sources").append(root);
  drawTools(card, id, api, el);
  preview.addEventListener("load", () => paint(card));
  return card;
}

function update(card, source, history) {
  const f = card.fields;
  f.state.textContent = source.state;
  f.state.className = "state " + source.state;
  f.fps.textContent = fmt(source.fps, 1);
  f.p50.textContent = fmt(source.latency_p50_ms, 0);
  f.p99.textContent = fmt(source.latency_p99_ms, 0);
  f.frames.textContent = source.frames;
  f.dropped.textContent = source.dropped + source.stale;
  f.reconnects.textContent = source.reconnects;
  card.remove.textContent = source.state === "ended" || source.state === "failed" ? "Forget" : "Remove";
  card.problem.textContent = source.error || "";
  const points = history || [];
  drawChart(card.fpsChart, points, [[1, "#1f6feb"]]);
  drawChart(card.latencyChart, points, [[2, "#1f6feb"], [3, "#cf222e"]]);
  // An ended source keeps its last frame; one that never showed a frame gets a plain panel, never
  // an image without a picture (a broken-image icon with its alt text).
  card.ended = ENDED.includes(source.state);
  card.preview.hidden = !previewsOn || card.frame === 0;
  card.panel.hidden = !previewsOn || card.frame > 0;
  card.panel.textContent = card.ended ? source.state : "waiting for a frame";
  if (previewsOn && !card.watching && !card.ended) watch(card, source.id);
  showShapes(card, source);
}

function drawChart(canvas, points, series) {
  const ratio = window.devicePixelRatio || 1;
  const width = canvas.clientWidth * ratio, height = canvas.clientHeight * ratio;
  if (!width || !height) return;
  if (canvas.width !== width || canvas.height !== height) { canvas.width = width; canvas.height = height; }
  const ctx = canvas.getContext("2d");
  ctx.clearRect(0, 0, width, height);
  if (points.length < 2) return;
  let top = 0;
  for (const p of points) for (const [i] of series) if (p[i] !== null && p[i] > top) top = p[i];
  top = top > 0 ? top * 1.15 : 1;
  const t0 = points[0][0], span = Math.max(points[points.length - 1][0] - t0, 1);
  ctx.font = (10 * ratio) + "px system-ui";
  ctx.fillStyle = "#656d76";
  ctx.fillText(top.toFixed(top < 10 ? 1 : 0), 3 * ratio, 11 * ratio);
  for (const [i, color] of series) {
    ctx.strokeStyle = color;
    ctx.lineWidth = 1.5 * ratio;
    ctx.beginPath();
    let started = false;
    for (const p of points) {
      if (p[i] === null) { started = false; continue; }
      const x = (p[0] - t0) / span * (width - 2) + 1, y = height - 1 - p[i] / top * (height - 2);
      if (started) ctx.lineTo(x, y); else { ctx.moveTo(x, y); started = true; }
    }
    ctx.stroke();
  }
}

// One request at a time per source: the next frame once it exists (the server waits for it). The
// requests are what keeps the daemon encoding, so a hidden tab or a removed card stops them.
async function watch(card, id) {
  card.watching = true;
  while (!card.gone && previewsOn && !card.ended) {
    if (document.visibilityState === "hidden") { await sleep(500); continue; }
    try {
      const response = await api("/console/preview/" + encodeURIComponent(id) + "?after=" + card.frame);
      if (response.status === 200) {
        card.frame = Number(response.headers.get("X-Frame")) || card.frame + 1;
        const url = URL.createObjectURL(await response.blob());
        const old = card.preview.src;
        card.preview.src = url;
        card.preview.hidden = false;
        card.panel.hidden = true;
        if (old.startsWith("blob:")) URL.revokeObjectURL(old);
      } else if (response.status !== 204) {
        await sleep(1000);
      }
    } catch (error) {
      await sleep(1000);
    }
  }
  card.watching = false;
}

function sleep(ms) { return new Promise((resolve) => setTimeout(resolve, ms)); }

// One stream at a time: each `stats` event is a new snapshot with the chart points not sent yet.
// A stream that ends (the daemon restarted, a proxy closed it) is opened again after a moment.
async function listen() {
  if (stream) stream.abort();
  const mine = stream = new AbortController();
  while (stream === mine) {
    try {
      const response = await api("/console/events?since=" + since, { signal: mine.signal });
      if (!response.ok) throw new Error("status " + response.status);
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const lines = buffer.slice(0, cut).split("\n");
          buffer = buffer.slice(cut + 2);
          const data = lines.filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
          if (data) show(JSON.parse(data));
        }
      }
      throw new Error("the stream ended");
    } catch (error) {
      if (stream !== mine || error.message === "unauthorised") return; // replaced, or waiting for the token
      document.getElementById("status").textContent = "not answering";
    }
    await sleep(RETRY_MS);
  }
}

function show(data) {
  document.getElementById("token-form").hidden = true;
  document.getElementById("console").hidden = false;
  previewsOn = data.previews;
  const live = data.sources.filter((s) => ["opening", "running", "draining"].includes(s.state)).length;
  document.getElementById("status").textContent =
    data.sources.length + " source(s), " + live + " running; rates over the last " + data.window_s + " s";
  for (const [id, points] of Object.entries(data.history)) {
    const held = (history.get(id) || []).concat(points);
    history.set(id, held.slice(-HISTORY));
    for (const p of points) if (p[0] > since) since = p[0];
  }
  const seen = new Set();
  for (const source of data.sources) {
    seen.add(source.id);
    let card = cards.get(source.id);
    if (!card) { card = makeCard(source.id); cards.set(source.id, card); }
    update(card, source, history.get(source.id));
  }
  for (const [id, card] of cards) {
    if (!seen.has(id)) { card.gone = true; card.root.remove(); cards.delete(id); history.delete(id); }
  }
  document.getElementById("empty").hidden = data.sources.length > 0;
}

async function removeSource(id, card) {
  try {
    const response = await api("/sources/" + encodeURIComponent(id), { method: "DELETE" });
    const body = await response.json();
    card.problem.textContent = response.ok ? "" : body.error;
  } catch (error) { /* asked for the token */ }
}

// The form's keys, and any other key of a `sources:` item as JSON: the daemon validates the whole
// item by the config's rules (POST /sources) and its one-line error is shown as it comes.
function newSource() {
  const body = { id: document.getElementById("add-id").value.trim(), uri: document.getElementById("add-uri").value.trim() };
  if (document.getElementById("add-realtime").checked) body.realtime = true;
  const policy = document.getElementById("add-policy").value;
  if (policy) body.policy = policy;
  const more = document.getElementById("add-more").value.trim();
  if (more) {
    let extra;
    try { extra = JSON.parse(more); } catch (error) { throw new Error("more keys: not JSON: " + error.message); }
    if (extra === null || typeof extra !== "object" || Array.isArray(extra)) throw new Error("more keys: a JSON object, e.g. {\"max_frames\": 100}");
    Object.assign(body, extra);
  }
  return body;
}

document.getElementById("add-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const out = document.getElementById("add-error");
  let body;
  try { body = newSource(); } catch (error) { out.textContent = error.message; return; }
  try {
    const response = await api("/sources", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
    const answer = await response.json();
    out.textContent = response.ok ? "" : answer.error;
    if (response.ok) document.getElementById("add-form").reset();
  } catch (error) { /* asked for the token */ }
});

document.getElementById("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, document.getElementById("token").value);
  listen();
});

listen();
