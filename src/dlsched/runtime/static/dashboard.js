// The dlsched dashboard: polls /v1/dashboard with the token given at sign-in (kept for this tab
// only) and draws the GPU map, the queues, the job table and utilization over time. Everything
// the server sends is inserted as text, never as HTML.
"use strict";
const REFRESH_MS = 2000;
let token = sessionStorage.getItem("dlsched-token");
let chart = null;
let timer = null;
let openJob = null;

const $ = (id) => document.getElementById(id);

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

async function api(path, options = {}) {
  const r = await fetch(path, {...options, headers: {Authorization: "Bearer " + token, ...(options.headers || {})}});
  if (r.status === 401) { signOut("that token was not accepted"); throw new Error("unauthorized"); }
  if (!r.ok) throw new Error(r.status + " " + (await r.text()));
  return r.json();
}

function when(t) {
  return t ? new Date(t * 1000).toLocaleString() : "";
}

function drawGpus(cluster) {
  const box = $("gpus");
  box.replaceChildren();
  for (const node of cluster.nodes) {
    const n = el("div", null, "node" + (node.alive ? "" : " down") + (node.in_service ? "" : " cordoned"));
    n.dataset.node = node.name;
    n.append(el("h3", node.name + (node.pool === "inference" ? " (inference: " + node.loan + ")" : "")
      + (node.in_service ? "" : " (out of service)")));
    for (let i = 0; i < node.gpus; i++) {
      const holders = (node.holders || {})[i] || [];
      const g = el("div", null, "gpu" + (holders.length > 1 ? " shared" : holders.length ? " busy" : "")
        + (node.loan === "loaned" || node.loan === "reclaiming" ? " " + node.loan : ""));
      g.dataset.gpu = node.name + "/" + i;
      g.append(el("div", "gpu " + i));
      for (const h of holders) g.append(el("div", h.tenant ? h.job + " (" + h.tenant + ")" : h.job));
      if (!holders.length) g.append(el("div", "idle"));
      n.append(g);
    }
    box.append(n);
  }
}

function drawTable(id, rows) {
  const body = $(id).querySelector("tbody");
  body.replaceChildren(...rows.map((cells) => {
    const tr = el("tr");
    for (const c of cells) tr.append(c instanceof Node ? el("td").appendChild(c).parentNode : el("td", c));
    return tr;
  }));
}

function drawJobs(jobs, total) {
  $("jobcount").textContent = "(" + jobs.length + " shown of " + total + ")";
  drawTable("jobs", jobs.map((j) => {
    const actions = el("span");
    const ev = el("button", "events", "link");
    ev.addEventListener("click", () => showEvents(j.id));
    actions.append(ev);
    if (j.status === "queued" || j.status === "running") {
      const c = el("button", "cancel", "link");
      c.dataset.cancel = j.id;
      c.addEventListener("click", () => cancel(j.id));
      actions.append(" ", c);
    }
    const progress = j.iterations ? j.iteration + " / " + j.iterations : String(j.iteration);
    const row = [j.id, j.tenant, j.status, j.gpus, progress, j.preemptions, when(j.deadline), when(j.predicted_finish), actions];
    return row;
  }));
  for (const tr of $("jobs").querySelectorAll("tbody tr")) tr.dataset.job = tr.firstChild.textContent;
}

function drawChart(history) {
  const t = history.map((h) => h.t);
  const util = history.map((h) => (h.gpus_usable ? (100 * h.gpus_used) / h.gpus_usable : 0));
  const queued = history.map((h) => h.queued);
  const data = [t, util, queued];
  if (!chart) {
    chart = new uPlot({
      width: Math.min(900, document.body.clientWidth - 40), height: 220,
      series: [{}, {label: "GPUs in use (%)", stroke: "#2a6fdb"}, {label: "jobs waiting", stroke: "#d97a00", scale: "jobs"}],
      axes: [{}, {label: "%"}, {side: 1, scale: "jobs", label: "jobs", grid: {show: false}}],
      scales: {x: {time: true}},
    }, data, $("chart"));
  } else {
    chart.setData(data);
  }
}

async function showEvents(id) {
  openJob = id;
  const job = await api("/v1/jobs/" + encodeURIComponent(id));
  $("timeline").hidden = false;
  $("timeline-job").textContent = id;
  $("events").replaceChildren(...job.events.map((e) => el("li", when(e.t) + " [" + e.status + "] " + e.message)));
}

async function cancel(id) {
  try {
    await api("/v1/jobs/" + encodeURIComponent(id) + "/cancel", {method: "POST"});
    refresh();
  } catch (e) { $("error").textContent = String(e.message); }
}

async function refresh() {
  try {
    const d = await api("/v1/dashboard");
    const c = d.cluster;
    const idle = [[c.gpus_serving_inference, "serving inference"], [c.gpus_out_of_service, "out of service or down"]]
      .filter(([n]) => n).map(([n, what]) => n + " " + what);
    $("summary").textContent = "policy " + c.policy + ": " + c.gpus_in_use + "/" + c.gpus_total
      + " GPUs in use" + (idle.length ? " (" + idle.join(", ") + ")" : "") + ", " + c.running.length + " running, " + c.queue.length + " queued" + (d.tenant ? " (tenant " + d.tenant + ")" : " (admin)");
    drawGpus(c);
    drawTable("queue", Object.entries(c.queue_by_tenant || {}).map(([t, n]) => [t, n]));
    drawTable("quota", Object.entries(c.over_quota || {}).map(([t, q]) => [t, q.reserved, q.nominal]));
    drawJobs(d.jobs, d.jobs_total);
    drawChart(d.history);
    if (openJob) showEvents(openJob);
    $("error").textContent = "";
  } catch (e) {
    if (e.message !== "unauthorized") $("error").textContent = "refresh failed: " + e.message;
  }
}

function signIn(t) {
  token = t;
  sessionStorage.setItem("dlsched-token", t);
  $("login").hidden = true;
  $("logout").hidden = false;
  $("main").hidden = false;
  refresh();
  clearInterval(timer);
  timer = setInterval(refresh, REFRESH_MS);
}

function signOut(why) {
  token = null;
  sessionStorage.removeItem("dlsched-token");
  clearInterval(timer);
  $("main").hidden = true;
  $("login").hidden = false;
  $("logout").hidden = true;
  $("error").textContent = why || "";
}

$("login").addEventListener("submit", (e) => { e.preventDefault(); signIn($("token").value.trim()); });
$("logout").addEventListener("click", () => signOut());
if (token) signIn(token);
