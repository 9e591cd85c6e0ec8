// framewire's events page: the recording outputs' history from GET /events (filtered by source,
// label, line or zone and time; paged with `before`), each event's snapshot, and its clip played
// in a <video> from GET /clips/<id> (Range requests, so it seeks). A job with several recording
// outputs gets a choice of them (each page lists them in `outputs`; `?output=` picks one). The token is the console's
// (sessionStorage); <img> and <video> cannot send a header, so their URLs carry it as ?token=.
"use strict";

const TOKEN_KEY = "framewire.token";
const PAGE = 50;
let next = null; // the cursor of the page after the last one shown
let asked = ""; // the filters' query of the rows shown

function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

function withToken(url) {
  const sent = token();
  return sent ? url + (url.includes("?") ? "&" : "?") + "token=" + encodeURIComponent(sent) : url;
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  for (const child of children) node.append(child);
  return node;
}

function askToken(message) {
  document.getElementById("status").textContent = "waiting for the token (http.token)";
  document.getElementById("history").hidden = true;
  document.getElementById("token-form").hidden = false;
  document.getElementById("token-error").textContent = message;
  document.getElementById("token").focus();
}

function epoch(id) {
  const value = document.getElementById(id).value;
  return value ? String(new Date(value).getTime() / 1000) : "";
}

function filters() {
  const query = new URLSearchParams();
  const output = document.getElementById("f-output").value;
  if (output) query.set("output", output);
  for (const [key, id] of [["source", "f-source"], ["label", "f-label"], ["place", "f-place"]]) {
    const value = document.getElementById(id).value.trim();
    if (value) query.set(key, value);
  }
  for (const [key, id] of [["since", "f-since"], ["until", "f-until"]]) {
    const value = epoch(id);
    if (value) query.set(key, value);
  }
  return query;
}

function play(event) {
  const player = document.getElementById("player");
  document.getElementById("player-box").hidden = false;
  document.getElementById("player-name").textContent = event.clip;
  player.src = withToken(event.clip_url);
  player.dataset.clip = String(event.clip_id);
  player.play().catch(() => {}); // a browser that wants a gesture first: the controls are there
}

function row(event) {
  const shot = event.snapshot_url
    ? el("img", { class: "snapshot", src: withToken(event.snapshot_url), alt: "snapshot of event " + event.id })
    : el("span", { class: "muted" }, "-");
  const clip = event.clip_url ? el("button", { type: "button", class: "play" }, "Play") : el("span", { class: "muted" }, "-");
  if (event.clip_url) clip.addEventListener("click", () => play(event));
  const when = new Date(event.wall * 1000).toLocaleString();
  return el("tr", { "data-event": String(event.id) }, el("td", {}, shot), el("td", {}, when),
            el("td", {}, event.source), el("td", {}, event.event), el("td", {}, event.label || "-"),
            el("td", {}, event.place || "-"), el("td", {}, clip));
}

async function load(more) {
  const query = more ? new URLSearchParams(asked) : filters();
  if (!more) asked = query.toString();
  query.set("limit", String(PAGE));
  if (more && next !== null) query.set("before", String(next));
  const headers = token() ? { Authorization: "Bearer " + token() } : {};
  const response = await fetch("/events?" + query.toString(), { headers, cache: "no-store" });
  if (response.status === 401) { askToken(token() ? "that token was refused" : ""); return; }
  const page = await response.json();
  const error = document.getElementById("filter-error");
  const body = document.querySelector("#events tbody");
  if (!response.ok) {
    error.textContent = page.error;
    if (!more) body.replaceChildren();
    document.getElementById("status").textContent = page.error;
    document.getElementById("history").hidden = false;
    return;
  }
  error.textContent = "";
  document.getElementById("token-form").hidden = true;
  document.getElementById("history").hidden = false;
  if (!more) body.replaceChildren();
  outputs(page.outputs || [page.output], page.output);
  for (const event of page.events) body.append(row(event));
  next = page.next;
  document.getElementById("more").hidden = next === null;
  const shown = body.children.length;
  document.getElementById("none").hidden = shown > 0;
  document.getElementById("status").textContent = shown + " event" + (shown === 1 ? "" : "s") + " (" + page.output + ")";
}

function outputs(names, current) {
  // The recording outputs to choose from: shown only when there is more than one.
  const select = document.getElementById("f-output");
  const have = [...select.options].map((o) => o.value);
  if (have.join("\n") !== names.join("\n")) {
    select.replaceChildren(...names.map((name) => el("option", { value: name }, name)));
  }
  select.value = current;
  select.hidden = names.length < 2;
}

document.getElementById("f-output").addEventListener("change", () => load(false));
document.getElementById("filters").addEventListener("submit", (event) => { event.preventDefault(); load(false); });
document.getElementById("more").addEventListener("click", () => load(true));
document.getElementById("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, document.getElementById("token").value);
  load(false);
});
load(false);
