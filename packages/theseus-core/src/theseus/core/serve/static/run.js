// One run: facts, live metric curves (one chart per metric), evaluations, checkpoints, log, config.
"use strict";

const { el } = theseus;
const name = decodeURIComponent(window.location.pathname.split("/").filter(Boolean).pop());
const api = `/api/runs/${encodeURIComponent(name)}`;
const series = new Map(); // metric -> {x: [], y: [], div}
// ?max_points=N on the page's URL: more (or fewer) points per curve than the default.
const maxPoints = Number(new URLSearchParams(window.location.search).get("max_points")) || 4000;
let lastStep = null;

// train/loss and val/loss first, then the rest of train/, val/, eval/, perf/ and others.
const FIRST = ["train/loss", "val/loss"];
const GROUPS = ["train/", "val/", "eval/", "perf/"];
function order(metric) {
  const first = FIRST.indexOf(metric);
  if (first >= 0) return `0${first}`;
  const group = GROUPS.findIndex((prefix) => metric.startsWith(prefix));
  return `${group >= 0 ? group + 1 : 9}${metric}`;
}

function chartId(metric) {
  return `chart-${metric.replace(/[^A-Za-z0-9_-]/g, "_")}`;
}

// A metric with one point so far (perf/first_step_time, a final evaluation) is a number,
// not a chart; its second point turns it into a chart.
function chart(metric, x, y) {
  const charts = document.getElementById("charts");
  const single = x.length === 1;
  const div = el("div", { class: single ? "chart single" : "chart", id: chartId(metric), "data-metric": metric });
  const after = [...charts.children].find((c) => order(c.dataset.metric) > order(metric));
  charts.insertBefore(div, after || null);
  series.set(metric, { div, single, x: [...x], y: [...y] });
  if (single) {
    div.append(el("div", { class: "metric" }, `${metric} (step ${x[0]})`),
      el("div", { class: "value" }, theseus.format(y[0])));
    return;
  }
  const mode = x.length > 300 ? "lines" : "lines+markers";
  Plotly.newPlot(div, [{ x, y, mode, marker: { size: 3 }, name: metric }],
    theseus.chartLayout(metric), { responsive: true, displaylogo: false });
}

function extend(metric, points) {
  const entry = series.get(metric);
  if (!entry.single) {
    Plotly.extendTraces(entry.div, { x: [points.x], y: [points.y] }, [0]);
    return;
  }
  entry.div.remove();
  chart(metric, [...entry.x, ...points.x], [...entry.y, ...points.y]);
}

function showLiveness(record) {
  // "live" only while the run is running; a finished (failed, died, ...) run says so
  const status = record && record.status;
  document.getElementById("liveness").textContent = status === "running" ? "live" : (status || "-");
}

function showLastStep() {
  document.getElementById("last-step").textContent = lastStep === null ? "-" : String(lastStep);
}

// Rows the follower brings: appended to the charts (a new metric gets a new chart).
function addRows(rows) {
  const fresh = new Map(); // metric -> {x, y}
  for (const row of rows) {
    if (typeof row.step !== "number") continue;
    lastStep = lastStep === null ? row.step : Math.max(lastStep, row.step);
    for (const [metric, value] of Object.entries(row)) {
      if (metric === "step" || theseus.number(value) === null) continue;
      if (!fresh.has(metric)) fresh.set(metric, { x: [], y: [] });
      fresh.get(metric).x.push(row.step);
      fresh.get(metric).y.push(theseus.plotted(value));
    }
  }
  for (const [metric, points] of fresh) {
    if (series.has(metric)) extend(metric, points);
    else chart(metric, points.x, points.y);
  }
  showLastStep();
}

// Every curve from the server (decimated when long), then follow the file from there.
let stopFollowing = () => {};
async function curves() {
  stopFollowing();
  const answer = await theseus.series(name, [], maxPoints);
  for (const entry of series.values()) { if (!entry.single) Plotly.purge(entry.div); entry.div.remove(); }
  series.clear();
  lastStep = null;
  for (const metric of Object.keys(answer.series).sort((a, b) => order(a).localeCompare(order(b)))) {
    const { x, y } = answer.series[metric];
    for (const step of x) if (lastStep === null || step > lastStep) lastStep = step;
    chart(metric, x, y);
  }
  showLastStep();
  stopFollowing = theseus.follow(name, (rows, reset) => (reset ? curves() : addRows(rows)), 2000, answer);
}

function facts(record, details) {
  const list = document.getElementById("facts");
  const items = [
    ["job", record.key],
    ["status", theseus.badge(record.status)],
    ["started", record.started || record.created],
    ["finished", record.finished],
    ["where", theseus.where(record)],
    ["attempts", record.attempts],
    ["lineage", details.lineage.length ? [name, ...details.lineage].join(" ← ") : null],
    ["branched into", details.children.length ? details.children.join(", ") : null],
    ["used by", details.used_by.length ? details.used_by.map((u) => `${u.run} (${u.via}${u.step === null ? "" : "@" + u.step})`).join(", ") : null],
    ["error", record.error],
    ["source", record.source_revision],
    ["versions", record.versions ? Object.entries(record.versions).map(([k, v]) => `${k} ${v}`).join(", ") : null],
  ];
  list.replaceChildren();
  for (const [label, value] of items) {
    if (value === null || value === undefined || value === "") continue;
    list.append(el("dt", {}, label), el("dd", {}, value));
  }
}

function evaluations(list) {
  const slot = document.getElementById("evaluations");
  if (!list.length) { slot.textContent = "none"; return; }
  const table = el("table", {}, el("tr", {}, el("th", {}, "step"), el("th", {}, "task"), el("th", {}, "metric"), el("th", {}, "value")));
  for (const entry of list) {
    for (const [task, metrics] of Object.entries(entry.results)) {
      for (const [metric, value] of Object.entries(metrics || {})) {
        table.append(el("tr", {}, el("td", { class: "num" }, theseus.format(entry.step)), el("td", {}, task),
          el("td", {}, metric), el("td", { class: "num" }, theseus.format(value))));
      }
    }
  }
  slot.classList.remove("muted");
  slot.replaceChildren(table);
}

function checkpoints(steps, record) {
  const slot = document.getElementById("checkpoints");
  if (!steps.length) { slot.textContent = "none"; return; }
  slot.classList.remove("muted");
  slot.replaceChildren(el("div", { id: "checkpoint-steps" }, steps.join(", ")),
    el("div", { class: "muted" }, `resumes from step ${record && record.checkpoint_step !== undefined ? record.checkpoint_step : steps[steps.length - 1]}`));
}

async function details() {
  const answer = await theseus.get(api);
  document.getElementById("title").textContent = `${name}`;
  document.title = `theseus: ${name}`;
  theseus.showProblems(document.getElementById("problems"), answer.problems);
  if (answer.record) facts(answer.record, answer);
  showLiveness(answer.record);
  evaluations(answer.evaluations);
  checkpoints(answer.checkpoints, answer.record);
}

async function logTail() {
  const answer = await theseus.get(`${api}/log?lines=200`);
  const pre = document.getElementById("log");
  const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
  pre.textContent = answer.lines.join("\n") || "(empty)";
  if (atBottom) pre.scrollTop = pre.scrollHeight;
}

async function config() {
  const answer = await theseus.get(`${api}/config`);
  document.getElementById("config").textContent = answer.text || "(missing)";
}

async function start() {
  try {
    await details();
  } catch (error) {
    document.getElementById("title").textContent = name;
    theseus.showProblems(document.getElementById("problems"), [error.message]);
    return;
  }
  theseus.showRoot();
  config().catch((error) => theseus.showProblems(document.getElementById("problems"), [error.message]));
  logTail().catch(() => {});
  curves().catch((error) => theseus.showProblems(document.getElementById("problems"), [error.message]));
  setInterval(() => {
    details().catch(() => {});
    logTail().catch(() => {});
  }, 5000);
}

start();
