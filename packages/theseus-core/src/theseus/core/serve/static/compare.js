// Compare: chosen runs' curves of one metric overlaid (optionally EMA-smoothed), and the
// config keys on which they differ. The URL keeps the choice: /compare?runs=a&runs=b&metric=m
"use strict";

const { el } = theseus;
const params = new URLSearchParams(window.location.search);
const data = new Map(); // run -> {rows: [], stop}
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

function metricChoices() {
  const names = new Set();
  for (const { rows } of data.values()) for (const row of rows) for (const key of Object.keys(row)) if (key !== "step") names.add(key);
  const select = document.getElementById("metric");
  const current = [...select.options].map((o) => o.value).join("|");
  const sorted = [...names].sort();
  if (sorted.join("|") !== current) {
    select.replaceChildren(...sorted.map((n) => el("option", { value: n }, n)));
  }
  if (sorted.includes(metric)) select.value = metric;
}

function draw() {
  metricChoices();
  const weight = Number(document.getElementById("smoothing").value);
  document.getElementById("smoothing-value").textContent = weight.toFixed(2);
  const traces = [];
  for (const [run, { rows }] of data) {
    const x = [], y = [];
    for (const row of rows) {
      if (!(metric in row) || typeof row.step !== "number") continue;
      const number = theseus.number(row[metric]);
      if (number === null) continue;
      x.push(row.step);
      y.push(Number.isFinite(number) ? number : null);
    }
    traces.push({ x, y: smooth(y, weight), name: run, mode: "lines" });
  }
  const layout = { ...theseus.chartLayout(metric), showlegend: true };
  Plotly.react(document.getElementById("overlay"), traces, layout, { responsive: true, displaylogo: false });
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
  document.getElementById("same").textContent = `(${answer.rows.length} keys differ, ${answer.same} are the same)`;
}

function choose() {
  const runs = chosen();
  for (const [run, entry] of data) if (!runs.includes(run)) { entry.stop(); data.delete(run); }
  for (const run of runs) {
    if (data.has(run)) continue;
    const entry = { rows: [], stop: null };
    data.set(run, entry);
    entry.stop = theseus.follow(run, (rows, reset) => {
      entry.rows = reset ? rows : entry.rows.concat(rows);
      draw();
    }, 3000);
  }
  const query = new URLSearchParams(runs.map((r) => ["runs", r]));
  query.set("metric", metric);
  history.replaceState(null, "", `/compare?${query}`);
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
