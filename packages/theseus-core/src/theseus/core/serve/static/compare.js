// Compare: chosen runs' curves of one metric overlaid (optionally EMA-smoothed), and the
// config keys on which they differ. The URL keeps the choice: /compare?runs=a&runs=b&metric=m
"use strict";

const { el } = theseus;
const params = new URLSearchParams(window.location.search);
const data = new Map(); // run -> {x, y, metric, stop}
let metric = params.get("metric") || "train/loss";

function chosen() {
  return [...document.getElementById("run-picker").selectedOptions].map((o) => o.value);
}

function smooth(values, weight) {
  if (!weight) return values;
  let last = null;
  return values.map((v) => {
    if (v === null) return null;
    last = last === null ? v : weight * last + (1 - weight) * v;
    return last;
  });
}

async function metricChoices(runs) {
  const names = new Set();
  for (const run of runs) {
    try {
      const details = await theseus.get(`/api/runs/${encodeURIComponent(run)}`);
      for (const name of details.metric_names) names.add(name);
    } catch (error) { /* the diff names the problem */ }
  }
  const select = document.getElementById("metric");
  const sorted = [...names].sort();
  select.replaceChildren(...sorted.map((n) => el("option", { value: n }, n)));
  if (!sorted.includes(metric) && sorted.length) metric = sorted.includes("train/loss") ? "train/loss" : sorted[0];
  select.value = metric;
}

function draw() {
  const weight = Number(document.getElementById("smoothing").value);
  document.getElementById("smoothing-value").textContent = weight.toFixed(2);
  const traces = [...data].map(([run, entry]) => ({ x: entry.x, y: smooth(entry.y, weight), name: run, mode: "lines" }));
  const layout = { ...theseus.chartLayout(metric), showlegend: true };
  Plotly.react(document.getElementById("overlay"), traces, layout, { responsive: true, displaylogo: false });
}

// One run's curve of `metric` from the server (decimated when long), then followed live.
async function load(run) {
  const entry = data.get(run);
  entry.stop();
  const answer = await theseus.series(run, [metric]);
  if (data.get(run) !== entry) return; // dropped meanwhile
  const points = answer.series[metric] || { x: [], y: [] };
  entry.x = points.x;
  entry.y = points.y;
  entry.stop = theseus.follow(run, (rows, reset) => {
    if (reset) { load(run); return; }
    for (const row of rows) {
      if (typeof row.step !== "number" || theseus.number(row[metric]) === null) continue;
      entry.x.push(row.step);
      entry.y.push(theseus.plotted(row[metric]));
    }
    draw();
  }, 3000, answer);
  draw();
}

async function diff(runs) {
  const head = document.querySelector("#diff thead");
  const body = document.querySelector("#diff tbody");
  if (runs.length < 2) {
    head.replaceChildren();
    body.replaceChildren(el("tr", {}, el("td", { class: "muted" }, "choose two runs or more")));
    document.getElementById("same").textContent = "";
    return;
  }
  const query = runs.map((r) => `runs=${encodeURIComponent(r)}`).join("&");
  const answer = await theseus.get(`/api/diff?${query}`);
  theseus.showProblems(document.getElementById("problems"), answer.problems);
  head.replaceChildren(el("tr", {}, el("th", {}, "key"), ...runs.map((r) => el("th", {}, theseus.runLink(r)))));
  body.replaceChildren(...answer.rows.map((row) => el("tr", { "data-key": row.key }, el("td", {}, row.key),
    ...runs.map((r) => el("td", {}, row.missing.includes(r) ? "(absent)" : theseus.format(row.values[r]))))));
  const differ = answer.rows.length === 1 ? "1 key differs" : `${answer.rows.length} keys differ`;
  document.getElementById("same").textContent = `(${differ}, ${answer.same} are the same)`;
}

async function choose() {
  const runs = chosen();
  for (const [run, entry] of data) if (!runs.includes(run)) { entry.stop(); data.delete(run); }
  const query = new URLSearchParams(runs.map((r) => ["runs", r]));
  await metricChoices(runs);
  query.set("metric", metric);
  history.replaceState(null, "", `/compare?${query}`);
  for (const run of runs) {
    if (!data.has(run)) data.set(run, { x: [], y: [], stop: () => {}, metric: null });
    const entry = data.get(run);
    if (entry.metric !== metric) { entry.metric = metric; load(run).catch((error) => theseus.showProblems(document.getElementById("problems"), [error.message])); }
  }
  draw();
  diff(runs).catch((error) => theseus.showProblems(document.getElementById("problems"), [error.message]));
}

async function start() {
  const answer = await theseus.get("/api/runs");
  document.getElementById("root").textContent = answer.root;
  const wanted = new Set(params.getAll("runs"));
  const picker = document.getElementById("run-picker");
  for (const row of answer.runs) {
    const option = el("option", { value: row.name }, row.name);
    option.selected = wanted.has(row.name);
    picker.append(option);
  }
  picker.addEventListener("change", choose);
  document.getElementById("metric").addEventListener("change", (event) => { metric = event.target.value; choose(); });
  document.getElementById("smoothing").addEventListener("input", draw);
  choose();
}

start().catch((error) => theseus.showProblems(document.getElementById("problems"), [error.message]));
