// The status page: polls /api/status once a second and redraws. Every value
// from the server goes into the page as text (textContent, attribute values),
// never as markup: client names and paths are whatever clients sent.
"use strict";

const POLL_MS = 1000;
const TOKEN_KEY = "ringfeed-token";

let token = sessionStorage.getItem(TOKEN_KEY) || "";
let sort = { key: "lagSeconds", desc: true };
let last = null;
let updates = 0;

// The token travels in the fragment (#token=...), which the browser never
// sends; keep it for this tab and take it out of the address bar.
function takeTokenFromFragment() {
  const match = /(?:^#|&)token=([^&]*)/.exec(location.hash);
  if (match) {
    token = decodeURIComponent(match[1]);
    sessionStorage.setItem(TOKEN_KEY, token);
    history.replaceState(null, "", location.pathname + location.search);
  }
}

function $(id) { return document.getElementById(id); }

function setState(state, message) {
  document.body.dataset.state = state;
  $("connection").textContent = message;
}

// 64-bit numbers arrive as strings (proto3 JSON) and fields at their default
// value are left out.
function num(v) { return v === undefined ? 0 : Number(v); }
function int(v) { return v === undefined ? "0" : String(v); }

function fmtCount(n) {
  if (n >= 1e9) return (n / 1e9).toFixed(2) + " G";
  if (n >= 1e6) return (n / 1e6).toFixed(2) + " M";
  if (n >= 1e4) return (n / 1e3).toFixed(1) + " k";
  return String(Math.round(n));
}

function fmtBytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? String(n) : n.toFixed(1)) + " " + units[i];
}

function fmtSeconds(s) {
  if (s === 0) return "0";
  if (s < 1e-6) return "< 1 µs";
  if (s < 1e-3) return (s * 1e6).toFixed(0) + " µs";
  if (s < 1) return (s * 1e3).toFixed(s < 0.01 ? 2 : 1) + " ms";
  if (s < 120) return s.toFixed(s < 10 ? 2 : 1) + " s";
  if (s < 7200) return (s / 60).toFixed(1) + " min";
  if (s < 172800) return (s / 3600).toFixed(1) + " h";
  return (s / 86400).toFixed(1) + " d";
}

function fmtDuration(ns) {
  let s = Math.max(0, Math.floor(ns / 1e9));
  const d = Math.floor(s / 86400); s -= d * 86400;
  const h = Math.floor(s / 3600); s -= h * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  if (d) return d + "d " + h + "h";
  if (h) return h + "h " + m + "m";
  if (m) return m + "m " + s + "s";
  return s + "s";
}

function fmtTime(ns) {
  if (!ns) return "-";
  const date = new Date(ns / 1e6);
  return date.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

// A p50 / p99 pair; "-" when nothing was observed in the window.
function percentiles(p50, p99) {
  if (!num(p99)) return "-";
  return fmtSeconds(num(p50)) + " / " + fmtSeconds(num(p99));
}

function cell(row, key, text, cls) {
  const td = document.createElement("td");
  td.dataset.k = key;
  td.textContent = text;
  if (cls) td.className = cls;
  row.appendChild(td);
  return td;
}

function filters(s) {
  const parts = [];
  if (s.pathPrefix) parts.push("prefix=" + s.pathPrefix);
  for (const p of s.pathPrefixes || []) parts.push("prefix=" + p);
  for (const d of s.directories || []) parts.push("dir=" + d);
  for (const p of s.excludePrefixes || []) parts.push("exclude=" + p);
  if (s.signature) parts.push("signature=" + s.signature);
  if (s.ordering === "ORDERING_PER_SHARD") parts.push("per-shard");
  return parts.length ? parts.join(" ") : "-";
}

function drawShards(status) {
  const body = document.querySelector("#shards tbody");
  const rows = [];
  for (const s of status.shards || []) {
    const tr = document.createElement("tr");
    tr.dataset.shard = String(num(s.shard));
    cell(tr, "shard", String(num(s.shard)));
    cell(tr, "committedNext", int(s.committedNext));
    cell(tr, "flushedNext", int(s.flushedNext));
    cell(tr, "evictedBelow", int(s.evictedBelow));
    cell(tr, "retainedFrom", int(s.retainedFrom));
    cell(tr, "ringBytes", fmtBytes(num(s.ringBytes)));
    cell(tr, "unflushedBytes", fmtBytes(num(s.unflushedBytes)));
    cell(tr, "segmentCount", String(num(s.segmentCount)));
    cell(tr, "appendEventsPerSecond", fmtCount(num(s.appendEventsPerSecond)));
    cell(tr, "flush", percentiles(s.flushP50Seconds, s.flushP99Seconds));
    cell(tr, "fsync", percentiles(s.fsyncP50Seconds, s.fsyncP99Seconds));
    cell(tr, "committedTsNs", fmtTime(num(s.committedTsNs)), "text");
    // A full disk is not a latch (appends resume once space is freed), but
    // it is the same news for an operator: appends are refused, and why.
    const stopped = s.latched || (s.diskFull ? "disk full: " + s.diskFull : "");
    cell(tr, "latched", stopped || "-", stopped ? "latched" : "text");
    rows.push(tr);
  }
  body.replaceChildren(...rows);
}

function sortValue(s, key) {
  const v = s[key];
  if (key === "clientName" || key === "peer" || key === "mode") return v || "";
  return num(v);
}

function drawSubscribers(status) {
  const list = (status.subscriberList || []).slice();
  list.sort((a, b) => {
    const x = sortValue(a, sort.key), y = sortValue(b, sort.key);
    const order = x < y ? -1 : x > y ? 1 : 0;
    return sort.desc ? -order : order;
  });
  const now = num(status.nowNs);
  const rows = list.map((s) => {
    const tr = document.createElement("tr");
    tr.dataset.clientId = int(s.clientId);
    const lag = num(s.lagSeconds);
    if (lag >= 1 && num(s.lagEvents) > 0) tr.className = "lagging";
    const name = cell(tr, "clientName", s.clientName || "-", "name");
    name.title = s.clientName || "";
    cell(tr, "clientId", int(s.clientId));
    cell(tr, "clientEpoch", int(s.clientEpoch));
    cell(tr, "peer", s.peer || "-", "text");
    cell(tr, "mode", s.mode || "-", "text");
    cell(tr, "filters", filters(s), "filters");
    cell(tr, "lagEvents", int(s.lagEvents), "lag");
    const lagCell = cell(tr, "lagSeconds", fmtSeconds(lag), "lag");
    lagCell.dataset.v = String(lag);
    cell(tr, "eventsPerSecond", fmtCount(num(s.eventsPerSecond)));
    cell(tr, "eventsSent", int(s.eventsSent));
    const since = num(s.connectedSinceNs);
    cell(tr, "connectedSinceNs", fmtTime(since) + " (" + fmtDuration(now - since) + ")", "text");
    return tr;
  });
  document.querySelector("#subscribers tbody").replaceChildren(...rows);
  const total = num(status.subscribers);
  $("no-subscribers").hidden = total !== 0;
  $("listed").textContent = list.length < total
    ? "(the " + list.length + " most lagging of " + total + ")"
    : "";
  for (const th of document.querySelectorAll("#subscribers th[data-sort]")) {
    th.classList.toggle("sorted", th.dataset.sort === sort.key);
    th.classList.toggle("asc", th.dataset.sort === sort.key && !sort.desc);
  }
}

const SVG = "http://www.w3.org/2000/svg";

// The last five minutes of one-second samples, oldest first: a line on a
// fixed time axis (now at the right edge), scaled to the largest value, with
// the area under it shaded.
const SPARK_SLOTS = 300;

function drawSpark(svg, values) {
  const width = 300, height = 40, top = 2;
  const max = Math.max(...values, 0);
  const step = width / (SPARK_SLOTS - 1);
  const x0 = width - (values.length - 1) * step;
  const points = values.map((v, i) => {
    const y = max > 0 ? height - (v / max) * (height - top) : height;
    return (x0 + i * step).toFixed(1) + "," + y.toFixed(1);
  });
  const line = document.createElementNS(SVG, "polyline");
  line.setAttribute("points", points.join(" "));
  const area = document.createElementNS(SVG, "polygon");
  if (points.length) {
    area.setAttribute("points", x0.toFixed(1) + "," + height + " " + points.join(" ") + " " + width + "," + height);
  }
  svg.replaceChildren(area, line);
  svg.dataset.points = String(values.length);
  return max;
}

function draw(status) {
  $("version").textContent = status.version || "?";
  $("node").textContent = num(status.nodeId) ? "node " + num(status.nodeId) : "";
  const now = num(status.nowNs);
  $("uptime").textContent = status.startedNs ? fmtDuration(now - num(status.startedNs)) : "-";
  $("data-dir").textContent = status.dataDir || "-";
  $("shard-count").textContent = String((status.shards || []).length);
  $("subscriber-count").textContent = int(status.subscribers);
  const history = status.history || [];
  const rates = history.map((h) => num(h.appendEventsPerSecond));
  const lags = history.map((h) => num(h.worstLagSeconds));
  const rateMax = drawSpark($("spark-rate"), rates);
  const lagMax = drawSpark($("spark-lag"), lags);
  $("rate-max").textContent = fmtCount(rateMax);
  $("lag-max").textContent = fmtSeconds(lagMax);
  $("rate-now").textContent = rates.length ? fmtCount(rates[rates.length - 1]) : "-";
  // Now: the most lagging subscriber listed (the server lists them so).
  const worst = Math.max(0, ...(status.subscriberList || []).map((s) => num(s.lagSeconds)));
  $("lag-now").textContent = fmtSeconds(worst);
  drawShards(status);
  drawObjectStore(status);
  drawSubscribers(status);
}

// Uploads of sealed segments (serve --object-store): shown only with one.
function drawObjectStore(status) {
  const store = status.objectStore;
  $("object-store").hidden = !store;
  if (!store) return;
  $("object-store-url").textContent = store.url || "";
  const below = (store.uploadedBelow || []).map((b, shard) => "shard " + shard + " below " + int(b));
  const waiting = num(store.lagSegments);
  $("object-store-text").textContent =
    int(store.segmentsUploaded) + " segment(s), " + fmtBytes(num(store.bytesUploaded)) +
    " uploaded since start; " + waiting + " sealed segment(s) waiting" +
    (waiting > 0 ? " (" + fmtBytes(num(store.lagBytes)) + "), the oldest sealed " + fmtSeconds(num(store.lagSeconds)) + " ago" : "") +
    ". In the store: " + (below.join(", ") || "-") + ". Read for subscribers below the local log: " +
    fmtBytes(num(store.bytesFetched)) + " fetched, " + int(store.cacheHits) + " cache hit(s), " +
    int(store.cacheMisses) + " miss(es), " + fmtBytes(num(store.cacheBytes)) + " cached" +
    (store.readError ? "; " + int(store.readErrors) + " failed read(s), the last: " + store.readError : "") + ".";
  const error = $("object-store-error");
  error.hidden = !store.error;
  error.textContent = store.error ? "last upload pass failed (" + int(store.errors) + " since start): " + store.error : "";
}

async function poll() {
  try {
    const headers = token ? { Authorization: "Bearer " + token } : {};
    const response = await fetch("/api/status?history=1", { headers, cache: "no-store" });
    if (response.status === 401 || response.status === 403) {
      const body = await response.json().catch(() => ({}));
      $("token-form").hidden = false;
      $("board").hidden = true;
      setState("unauthorized", (body.error || response.statusText) + (token ? "" : " (no token given)"));
      return false;
    }
    if (!response.ok) throw new Error(response.status + " " + response.statusText);
    last = await response.json();
    $("token-form").hidden = true;
    $("board").hidden = false;
    draw(last);
    updates++;
    document.body.dataset.updates = String(updates);
    setState("ok", "updated " + new Date().toLocaleTimeString() + ", every " + POLL_MS / 1000 + " s");
  } catch (e) {
    setState("error", "cannot reach the server: " + e.message + " (retrying)");
  }
  return true;
}

// One poll at a time: a token given while a poll is out starts no second loop.
let timer = null;
async function loop() {
  clearTimeout(timer);
  timer = null;
  const keepGoing = await poll();
  if (keepGoing && timer === null) timer = setTimeout(loop, POLL_MS);
}

document.addEventListener("DOMContentLoaded", () => {
  takeTokenFromFragment();
  for (const th of document.querySelectorAll("#subscribers th[data-sort]")) {
    th.addEventListener("click", () => {
      const key = th.dataset.sort;
      sort = sort.key === key ? { key, desc: !sort.desc } : { key, desc: true };
      if (last) drawSubscribers(last);
    });
  }
  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    token = $("token").value.trim();
    sessionStorage.setItem(TOKEN_KEY, token);
    loop();
  });
  loop();
});
