// The console's lines and zones: drawn over a source's preview with their live counts (from the
// event stream's `analytics` of each source), and drawn by the user: "Draw line" then two clicks,
// "Draw zone" then a click per corner and a click on the first corner (or Save) to close it; a name,
// then Save sends PATCH /sources/{id} with the source's lines (or zones), that one added or moved.
// The daemon checks it as the config is and says what it refuses in one line, shown as it comes.
"use strict";

const NAME = /^[A-Za-z_][A-Za-z0-9_-]{0,63}$/;
const CLOSE_PX = 10; // a click this near the first corner closes a zone

function drawTools(card, id, api, el) {
  const overlay = el("canvas", { class: "overlay" });
  const view = el("div", { class: "view" });
  card.preview.replaceWith(view);
  view.append(card.preview, overlay);
  const lineButton = el("button", { type: "button", class: "draw-line" }, "Draw line");
  const zoneButton = el("button", { type: "button", class: "draw-zone" }, "Draw zone");
  const name = el("input", { class: "shape-name", placeholder: "name", "aria-label": "name of the line or zone", size: "10" });
  const save = el("button", { type: "button", class: "save-shape", disabled: "" }, "Save");
  const cancel = el("button", { type: "button", class: "cancel-shape", hidden: "" }, "Cancel");
  const status = el("span", { class: "draw-status" });
  const tools = el("div", { class: "draw" }, lineButton, zoneButton, name, save, cancel, status);
  const counts = el("ul", { class: "counts" });
  view.after(tools, counts);
  const draw = { overlay, save, cancel, status, counts, name, mode: null, points: [], closed: false, source: null };
  card.draw = draw;
  const start = (mode) => {
    Object.assign(draw, { mode, points: [], closed: false });
    status.textContent = mode === "line" ? "click the line's two ends on the preview"
                                         : "click each corner, then the first one to close";
    status.className = "draw-status";
    cancel.hidden = false;
    save.disabled = true;
    paint(card);
  };
  lineButton.addEventListener("click", () => start("line"));
  zoneButton.addEventListener("click", () => start("zone"));
  cancel.addEventListener("click", () => stop(card, ""));
  overlay.addEventListener("click", (event) => click(card, event));
  save.addEventListener("click", () => saveShape(card, id, api));
}

function stop(card, message) {
  const draw = card.draw;
  Object.assign(draw, { mode: null, points: [], closed: false });
  draw.cancel.hidden = true;
  draw.save.disabled = true;
  draw.status.textContent = message;
  paint(card);
}

// Where the frame's pixels are on the overlay: the preview keeps its aspect inside its box. Its size
// is the last loaded picture's: while the next one loads, the element may say 0.
function frameBox(card) {
  const img = card.preview, source = card.draw.source;
  if (img.naturalWidth) card.draw.natural = [img.naturalWidth, img.naturalHeight];
  const natural = card.draw.natural;
  if (!source || !source.width || !natural) return null;
  const w = img.clientWidth, h = img.clientHeight;
  const scale = Math.min(w / natural[0], h / natural[1]);
  const shownW = natural[0] * scale, shownH = natural[1] * scale;
  return { x: (w - shownW) / 2, y: (h - shownH) / 2, k: shownW / source.width };
}

function click(card, event) {
  const draw = card.draw, box = frameBox(card);
  if (!draw.mode || draw.closed || !box) return;
  const rect = draw.overlay.getBoundingClientRect();
  const px = event.clientX - rect.left, py = event.clientY - rect.top;
  const point = [Math.round((px - box.x) / box.k * 10) / 10, Math.round((py - box.y) / box.k * 10) / 10];
  const source = draw.source;
  point[0] = Math.min(Math.max(point[0], 0), source.width);
  point[1] = Math.min(Math.max(point[1], 0), source.height);
  if (draw.mode === "zone" && draw.points.length >= 3) {
    const first = draw.points[0];
    if (Math.hypot((first[0] - point[0]) * box.k, (first[1] - point[1]) * box.k) <= CLOSE_PX) draw.closed = true;
  }
  if (!draw.closed) draw.points.push(point);
  if (draw.mode === "line" && draw.points.length === 2) draw.closed = true;
  const ready = draw.mode === "line" ? draw.points.length === 2 : draw.points.length >= 3;
  draw.save.disabled = !ready;
  draw.status.textContent = draw.closed ? "name it and save" : draw.status.textContent;
  paint(card);
}

async function saveShape(card, id, api) {
  const draw = card.draw, name = draw.name.value.trim();
  if (!NAME.test(name)) { showError(draw, "name: letters, digits, _ or -, starting with a letter"); return; }
  try {
    const got = await api("/sources/" + encodeURIComponent(id));
    const current = await got.json();
    if (!got.ok) { showError(draw, current.error); return; }
    const applied = current.applied || {};
    const scale = applied.normalized ? [draw.source.width, draw.source.height] : [1, 1];
    const points = draw.points.map((p) => [p[0] / scale[0], p[1] / scale[1]]);
    const key = draw.mode === "line" ? "lines" : "zones";
    const shape = draw.mode === "line" ? { start: points[0], end: points[1] } : { polygon: points };
    const shapes = (applied[key] || []).slice();
    const at = shapes.findIndex((s) => s.name === name);
    if (at >= 0) shapes[at] = Object.assign({}, shapes[at], shape); // moved: its other keys and counts stay
    else shapes.push(Object.assign({ name }, shape));
    const response = await api("/sources/" + encodeURIComponent(id), {
      method: "PATCH", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ [key]: shapes }) });
    const answer = await response.json();
    if (!response.ok) { showError(draw, answer.error); return; }
    stop(card, "saved " + (draw.mode === "line" ? "line " : "zone ") + name);
  } catch (error) { /* asked for the token */ }
}

function showError(draw, message) {
  draw.status.textContent = message;
  draw.status.className = "draw-status error";
}

// The lines and zones as the source's latest frame counted them, and the one being drawn.
function showShapes(card, source) {
  const draw = card.draw;
  draw.source = source;
  const analytics = source.analytics || { lines: {}, zones: {} };
  const items = [];
  for (const [name, line] of Object.entries(analytics.lines || {}))
    items.push(["line:" + name, name + ": in " + line.in + ", out " + line.out]);
  for (const [name, zone] of Object.entries(analytics.zones || {}))
    items.push(["zone:" + name, name + ": " + zone.occupancy + " in it, " + zone.entries + " entered, " + zone.exits + " left"]);
  const shown = items.map(([key, text]) => key + "=" + text).join("|");
  if (draw.counts.dataset.shown !== shown) {
    draw.counts.dataset.shown = shown;
    draw.counts.replaceChildren(...items.map(([key, text]) => {
      const item = document.createElement("li");
      item.dataset.shape = key;
      item.textContent = text;
      return item;
    }));
  }
  paint(card);
}

function paint(card) {
  const draw = card.draw, canvas = draw.overlay, img = card.preview;
  canvas.hidden = img.hidden;
  if (img.hidden) return;
  const ratio = window.devicePixelRatio || 1;
  const width = img.clientWidth, height = img.clientHeight;
  canvas.style.width = width + "px";
  canvas.style.height = height + "px";
  if (canvas.width !== width * ratio || canvas.height !== height * ratio) {
    canvas.width = width * ratio;
    canvas.height = height * ratio;
  }
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, width, height);
  const box = frameBox(card);
  if (!box) return;
  const at = (p) => [box.x + p[0] * box.k, box.y + p[1] * box.k];
  const analytics = (draw.source && draw.source.analytics) || { lines: {}, zones: {} };
  ctx.font = "12px system-ui";
  ctx.lineWidth = 2;
  for (const [name, zone] of Object.entries(analytics.zones || {})) {
    if (!zone.polygon || zone.polygon.length < 3) continue;
    path(ctx, zone.polygon.map(at), true);
    ctx.fillStyle = "rgba(31, 111, 235, 0.18)";
    ctx.fill();
    ctx.strokeStyle = "#1f6feb";
    ctx.stroke();
    label(ctx, at(zone.polygon[0]), name + " " + zone.occupancy + " (" + zone.entries + " in)");
  }
  for (const [name, line] of Object.entries(analytics.lines || {})) {
    if (!line.points || line.points.length !== 2) continue;
    path(ctx, line.points.map(at), false);
    ctx.strokeStyle = "#2da44e";
    ctx.stroke();
    label(ctx, at(line.points[0]), name + " in " + line.in + " out " + line.out);
  }
  if (draw.points.length) {
    ctx.setLineDash([5, 4]);
    path(ctx, draw.points.map(at), draw.closed && draw.mode === "zone");
    ctx.strokeStyle = "#bf8700";
    ctx.stroke();
    ctx.setLineDash([]);
    for (const p of draw.points.map(at)) { ctx.fillStyle = "#bf8700"; ctx.fillRect(p[0] - 3, p[1] - 3, 6, 6); }
  }
}

function path(ctx, points, closed) {
  ctx.beginPath();
  points.forEach((p, i) => (i ? ctx.lineTo(p[0], p[1]) : ctx.moveTo(p[0], p[1])));
  if (closed) ctx.closePath();
}

function label(ctx, p, text) {
  const w = ctx.measureText(text).width + 6;
  ctx.fillStyle = "rgba(0, 0, 0, 0.6)";
  ctx.fillRect(p[0], p[1], w, 16);
  ctx.fillStyle = "#fff";
  ctx.fillText(text, p[0] + 3, p[1] + 12);
}
