// raylink dashboard: reads Flink's REST API of this endpoint once a second and draws the job
// list and a job's page (JobGraph as a layered DAG, subtasks, watermarks, the autoscaler, checkpoints,
// exceptions, cancel). Plain JavaScript, no build step, no network beyond this endpoint.
"use strict";

const REFRESH_MS = 1000;
const BOX_W = 280, BOX_H = 118, GAP_X = 120, GAP_Y = 36, PAD = 20;
let timer = null;
let selectedVertex = null;
let renderedRoute = null;

function esc(text) {
  return String(text).replace(/[&<>"']/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

// The server's token comes in the address's fragment (#token=...&next=/jobs/<id>), which the
// browser never sends anywhere; it is kept in this tab's sessionStorage, removed from the
// address bar and the history, and sent as a header. No cookie: every port would receive it.
const TOKEN_KEY = "raylink-token";
(function takeTokenFromAddress() {
  const fragment = location.hash.replace(/^#/, "");
  if (!fragment.startsWith("token=")) return;
  const params = new URLSearchParams(fragment);
  if (params.get("token")) sessionStorage.setItem(TOKEN_KEY, params.get("token"));
  const next = params.get("next");
  history.replaceState(null, "", location.pathname + location.search + (next ? "#" + next : ""));
})();

function authHeaders() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  return token ? { Authorization: `Bearer ${token}` } : {};
}

async function api(path, options) {
  const init = Object.assign({ credentials: "omit", cache: "no-store" }, options || {});
  init.headers = Object.assign(authHeaders(), init.headers || {});
  const response = await fetch(path, init);
  if (response.status === 401) {
    const error = new Error("401: open the dashboard with the address printed when the job started (it carries the token)");
    error.status = 401;
    throw error;
  }
  if (!response.ok) {
    let detail = response.statusText;
    try { detail = (await response.json()).errors.join("; "); } catch (e) { /* not JSON */ }
    const error = new Error(`${response.status}: ${detail}`);
    error.status = response.status;
    throw error;
  }
  return response.status === 204 ? {} : response.json();
}

function fmtTime(ms) { return ms > 0 ? new Date(ms).toLocaleString() : "-"; }
function fmtDuration(ms) {
  if (ms < 0) return "-";
  const s = Math.floor(ms / 1000), h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60);
  return (h ? `${h}h ` : "") + (h || m ? `${m}m ` : "") + `${s % 60}s`;
}
function fmtCount(n) { return Number(n).toLocaleString("en-US"); }
function state(text) { return `<span class="state ${esc(text)}">${esc(text)}</span>`; }
function pct(ratio) { return Math.round(ratio * 100); }

function setConnection(text) { document.getElementById("connection").textContent = text || ""; }

// -- job list ---------------------------------------------------------------------------------
async function renderJobList(app) {
  const overview = await api("/jobs/overview");
  const rows = overview.jobs.map(job => `
    <tr data-jid="${esc(job.jid)}">
      <td class="name"><a href="#/jobs/${esc(job.jid)}">${esc(job.name)}</a></td>
      <td>${state(job.state)}</td>
      <td>${esc(fmtTime(job["start-time"]))}</td>
      <td>${esc(fmtDuration(job.duration))}</td>
      <td>${esc(job.tasks.total)}</td>
      <td class="restarts">${esc(job.numRestarts)}</td>
      <td class="muted">${esc(job.jid)}</td>
    </tr>`).join("");
  app.innerHTML = `<section><h2>Jobs</h2>
    <table id="jobs"><thead><tr><th>Name</th><th>State</th><th>Start time</th><th>Duration</th>
    <th>Tasks</th><th>Restarts</th><th>Job ID</th></tr></thead>
    <tbody>${rows || '<tr><td colspan="7" class="muted">No jobs.</td></tr>'}</tbody></table></section>`;
}

// -- the JobGraph as a layered DAG ----------------------------------------------------------------
function layout(nodes) {
  // layer = longest path from a source; order within a layer: plan order
  const byId = new Map(nodes.map(n => [n.id, n]));
  const layer = new Map();
  const depth = id => {
    if (layer.has(id)) return layer.get(id);
    layer.set(id, 0);
    const inputs = (byId.get(id).inputs || []).filter(i => byId.has(i.id));
    const value = inputs.length ? 1 + Math.max(...inputs.map(i => depth(i.id))) : 0;
    layer.set(id, value);
    return value;
  };
  nodes.forEach(n => depth(n.id));
  const rows = new Map();
  const pos = new Map();
  nodes.forEach(n => {
    const l = layer.get(n.id);
    const r = rows.get(l) || 0;
    rows.set(l, r + 1);
    pos.set(n.id, { x: PAD + l * (BOX_W + GAP_X), y: PAD + r * (BOX_H + GAP_Y) });
  });
  const layers = Math.max(...layer.values()) + 1;
  const height = Math.max(...rows.values());
  return { pos, width: 2 * PAD + layers * BOX_W + (layers - 1) * GAP_X, height: 2 * PAD + height * BOX_H + (height - 1) * GAP_Y };
}

function shorten(text, max) { return text.length > max ? text.slice(0, max - 1) + "…" : text; }

function drawDag(job, pressure) {
  const nodes = job.plan.nodes;
  const { pos, width, height } = layout(nodes);
  const vertices = new Map(job.vertices.map(v => [v.id, v]));
  const edges = [];
  nodes.forEach(node => (node.inputs || []).forEach(input => {
    const from = pos.get(input.id), to = pos.get(node.id);
    if (!from || !to) return;
    const x1 = from.x + BOX_W, y1 = from.y + BOX_H / 2, x2 = to.x, y2 = to.y + BOX_H / 2, mx = (x1 + x2) / 2;
    edges.push(`<path class="edge" marker-end="url(#arrow)" d="M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2 - 2},${y2}"/>
      <text class="edge-label" x="${mx}" y="${(y1 + y2) / 2 - 6}" text-anchor="middle">${esc(input.ship_strategy)}</text>`);
  }));
  const boxes = nodes.map(node => {
    const v = vertices.get(node.id);
    const bp = pressure.get(node.id) || { "backpressure-level": "ok", subtasks: [] };
    const level = bp["backpressure-level"];
    const busy = Math.max(0, ...bp.subtasks.map(s => s.busyRatio));
    const back = Math.max(0, ...bp.subtasks.map(s => s.ratio));
    const m = v.metrics;
    const p = pos.get(node.id);
    const selected = node.id === selectedVertex ? " selected" : "";
    return `<g class="vertex ${esc(level)}${selected}" data-vertex-id="${esc(node.id)}" data-name="${esc(v.name)}"
        data-backpressure="${esc(level)}" data-busy="${pct(busy)}" data-records-in="${m["read-records"]}"
        data-records-out="${m["write-records"]}" transform="translate(${p.x},${p.y})">
      <title>${esc(v.name)}</title>
      <rect class="box" width="${BOX_W}" height="${BOX_H}"/>
      <text class="vname" x="10" y="20">${esc(shorten(v.name, 36))}</text>
      <text x="10" y="40">Parallelism: ${v.parallelism} · ${esc(v.status)}</text>
      <text x="10" y="58" class="records">Records received: ${fmtCount(m["read-records"])}</text>
      <text x="10" y="76" class="records">Records sent: ${fmtCount(m["write-records"])}</text>
      <text x="10" y="96" class="busy">Busy: ${pct(busy)}% · Backpressured: ${pct(back)}%</text>
      <rect class="badge" x="${BOX_W - 58}" y="86" width="50" height="18"/>
      <text class="badge" x="${BOX_W - 33}" y="99" text-anchor="middle">${esc(level.toUpperCase())}</text>
    </g>`;
  });
  return `<svg class="dag" width="${width}" height="${height}" xmlns="http://www.w3.org/2000/svg">
    <defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto">
      <path d="M0,0 L10,5 L0,10 z" fill="#595959"/></marker></defs>
    ${edges.join("")}${boxes.join("")}</svg>`;
}

// -- one job ----------------------------------------------------------------------------------------
function subtaskTable(details, bp, marks) {
  const pressure = new Map((bp ? bp.subtasks : []).map(s => [s.subtask, s]));
  const watermark = new Map((marks || []).map(w => [Number(w.id.split(".")[0]), w.value]));
  const rows = details.subtasks.map(s => {
    const b = pressure.get(s.subtask) || { ratio: 0, busyRatio: 0, idleRatio: 0, "backpressure-level": "ok" };
    const wm = watermark.get(s.subtask);
    const wmText = wm === undefined || Number(wm) <= -9007199254740991 ? "No Watermark" : wm;
    return `<tr><td>${s.subtask}</td><td>${state(s.status)}</td><td>${s.attempt}</td>
      <td>${fmtCount(s.metrics["read-records"])}</td><td>${fmtCount(s.metrics["write-records"])}</td>
      <td><span class="busybar"><span style="width:${pct(b.busyRatio)}%"></span></span>${pct(b.busyRatio)}%</td>
      <td><span class="bp ${esc(b["backpressure-level"])}">${esc(b["backpressure-level"].toUpperCase())}</span> ${pct(b.ratio)}%</td>
      <td>${pct(b.idleRatio)}%</td><td>${esc(wmText)}</td><td class="muted">${esc(s["taskmanager-id"])}</td>
      <td class="muted">${esc(s.host || "")}</td></tr>`;
  }).join("");
  const res = Object.entries(details.resources || {}).filter(([k]) => k !== "profile")
    .map(([k, v]) => k === "memory" ? `memory=${Math.round(v / 1048576)} MiB` : `${k}=${v}`).join(", ");
  const group = details.slotSharingGroup ? `slot sharing group ${details.slotSharingGroup}` : "";
  const where = [group, res ? `${res} per TaskExecutor` : ""].filter(Boolean).join(": ");
  return `<h3>${esc(details.name)}</h3>${where ? `<p class="muted" id="resources">${esc(where)}</p>` : ""}
    <table id="subtasks"><thead><tr><th>Subtask</th><th>Status</th><th>Attempt</th>
    <th>Records received</th><th>Records sent</th><th>Busy</th><th>Back pressure</th><th>Idle</th>
    <th>Watermark</th><th>TaskManager</th><th>Host</th></tr></thead><tbody>${rows}</tbody></table>`;
}

function checkpointSection(cp) {
  const c = cp.counts;
  const rows = cp.history.map(h => `<tr><td>${h.id}</td><td>${state(h.status)}</td>
    <td>${esc(fmtTime(h.latest_ack_timestamp))}</td><td>${h.end_to_end_duration} ms</td>
    <td>${h.state_size === undefined ? "unknown" : `${fmtCount(h.state_size)} B`}</td><td>${h.num_acknowledged_subtasks}/${h.num_subtasks}</td></tr>`).join("");
  const failed = cp.latest.failed ? `<p class="bp high">Last failure: ${esc(cp.latest.failed.failure_message)}</p>` : "";
  return `<p>Completed: <b id="cp-completed">${c.completed}</b> · In progress: ${c.in_progress} · Failed: ${c.failed}
    · Restored: ${c.restored}</p>${failed}
    <table id="checkpoints"><thead><tr><th>ID</th><th>Status</th><th>Acknowledged</th><th>End to end</th>
    <th>State size</th><th>Subtasks</th></tr></thead><tbody>${rows ||
    '<tr><td colspan="6" class="muted">No completed checkpoint yet.</td></tr>'}</tbody></table>`;
}

function autoscalerSection(a) {
  const names = Object.fromEntries(Object.entries(a.vertices).map(([id, v]) => [id, v.name]));
  const fmt = v => v === null || v === undefined ? "-" : fmtCount(Math.round(v));
  const rows = Object.entries(a.vertices).map(([id, v]) => `<tr><td>${esc(v.name)}</td><td>${v.PARALLELISM ?? "-"}</td>
    <td>${v.RECOMMENDED_PARALLELISM ?? "-"}</td><td>${fmt(v.TRUE_PROCESSING_RATE)}</td><td>${fmt(v.TARGET_DATA_RATE)}</td>
    <td>${fmt(v.LAG)}</td><td>${v.LOAD === null || v.LOAD === undefined ? "-" : Math.round(100 * v.LOAD) + " %"}</td></tr>`).join("");
  const events = a.events.slice(-8).reverse().map(e => `<li><span class="muted">${esc(fmtTime(e.timestamp))}</span>
    <b>${esc(e.reason)}</b>: ${esc(e.message.replace(/Vertex ID ([0-9a-f]+)/g, (m, id) => names[id] || m))}</li>`).join("");
  return `<p id="autoscaler-state">${esc(a.state)} · scalings ${a.scalings} · errors ${a.errors}</p>
    <table id="autoscaler"><thead><tr><th>Vertex</th><th>Parallelism</th><th>Recommended</th>
    <th>True processing rate</th><th>Target data rate</th><th>Lag</th><th>Load</th></tr></thead>
    <tbody>${rows || '<tr><td colspan="7" class="muted">No evaluation yet.</td></tr>'}</tbody></table>
    <ul class="events">${events}</ul>`;
}

function exceptionSection(ex) {
  const entries = ex.exceptionHistory.entries;
  if (!entries.length) return '<p class="muted">No exceptions.</p>';
  return entries.map(e => `<div class="exception"><p><b>${esc(e.exceptionName)}</b> in
    <b class="task">${esc(e.taskName || "the job")}</b> at ${esc(fmtTime(e.timestamp))}</p>
    <pre class="trace">${esc(e.stacktrace)}</pre></div>`).join("");
}

async function cancelJob(jid) {
  if (!window.confirm("Cancel this job?")) return;
  const button = document.getElementById("cancel");
  button.disabled = true;
  try {
    await api(`/jobs/${encodeURIComponent(jid)}?mode=cancel`, { method: "PATCH" });
    button.textContent = "Cancelling…";
  } catch (error) {
    button.disabled = false;
    window.alert(`Cancel failed: ${error.message}`);
  }
}

async function renderJob(app, jid) {
  const job = await api(`/jobs/${encodeURIComponent(jid)}`);
  const ids = job.vertices.map(v => v.id);
  if (!ids.includes(selectedVertex)) selectedVertex = ids[ids.length - 1];
  const base = `/jobs/${encodeURIComponent(jid)}/vertices/`;
  const [pressures, details, marks, checkpoints, exceptions, autoscaler] = await Promise.all([
    Promise.all(ids.map(id => api(base + id + "/backpressure").catch(() => null))),
    api(base + selectedVertex).catch(() => null),
    api(base + selectedVertex + "/watermarks").catch(() => []),
    api(`/jobs/${encodeURIComponent(jid)}/checkpoints`).catch(() => null),
    api(`/jobs/${encodeURIComponent(jid)}/exceptions`).catch(() => null),
    api(`/jobs/${encodeURIComponent(jid)}/autoscaler`).catch(() => null),
  ]);
  const pressure = new Map(ids.map((id, i) => [id, pressures[i]]).filter(e => e[1]));
  const ended = ["FINISHED", "CANCELED", "FAILED"].includes(job.state);
  app.innerHTML = `
    <section class="job-head">
      <h2 id="job-name">${esc(job.name)}</h2> ${state(job.state)}
      <span class="muted">${esc(job.jid)}</span>
      <span>Start: ${esc(fmtTime(job["start-time"]))}</span>
      <span>Duration: ${esc(fmtDuration(job.duration))}</span>
      <span>Restarts: <b id="restarts">${esc(job.numRestarts)}</b></span>
      <button id="cancel" class="cancel" ${ended ? "disabled" : ""}>Cancel Job</button>
    </section>
    <section><h2>JobGraph</h2><div class="dag-wrap">${drawDag(job, pressure)}</div></section>
    <section><h2>Subtasks</h2>${details ? subtaskTable(details, pressure.get(selectedVertex), marks) : ""}</section>
    ${autoscaler && autoscaler.enabled ? `<section><h2>Autoscaler</h2>${autoscalerSection(autoscaler)}</section>` : ""}
    <div class="grid">
      <section><h2>Checkpoints</h2>${checkpoints ? checkpointSection(checkpoints) : ""}</section>
      <section><h2>Exceptions</h2>${exceptions ? exceptionSection(exceptions) : ""}</section>
    </div>`;
  document.getElementById("cancel").onclick = () => cancelJob(jid);
  app.querySelectorAll("svg.dag .vertex").forEach(g => {
    g.onclick = () => { selectedVertex = g.dataset.vertexId; refresh(); };
  });
}

// -- routing and refresh ----------------------------------------------------------------------------
async function refresh() {
  const app = document.getElementById("app");
  const route = location.hash.replace(/^#/, "") || "/";
  const match = route.match(/^\/jobs\/([^/]+)/);
  try {
    if (match) await renderJob(app, decodeURIComponent(match[1]));
    else await renderJobList(app);
    setConnection("");
    renderedRoute = route;
  } catch (error) {
    setConnection(error.status ? error.message : "the endpoint is not reachable (the job may have ended)");
    if (renderedRoute !== route) app.innerHTML = `<section><p class="muted">${esc(error.message)}</p></section>`;
  }
}

function schedule() {
  clearTimeout(timer);
  refresh().finally(() => { timer = setTimeout(schedule, REFRESH_MS); });
}

window.addEventListener("hashchange", () => { selectedVertex = null; renderedRoute = null; schedule(); });
schedule();
