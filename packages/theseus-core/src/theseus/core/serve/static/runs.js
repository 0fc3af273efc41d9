// The runs table: filterable, refreshed every few seconds, rows selectable for compare.
"use strict";

const { el } = theseus;
const selected = new Set();
let rows = [];
let sortKey = "started";
let sortDown = true; // newest first

function sortValue(row, key) {
  if (key === "where") return theseus.where(row);
  const value = row[key];
  const number = theseus.number(value);
  return number !== null ? number : value === null || value === undefined ? null : String(value);
}

function compareRows(a, b) {
  const x = sortValue(a, sortKey), y = sortValue(b, sortKey);
  if (x === y) return a.name.localeCompare(b.name);
  if (x === null) return 1; // empty cells last either way
  if (y === null) return -1;
  const order = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
  return sortDown ? -order : order;
}

function matches(row, text, status) {
  if (status && row.status !== status) return false;
  if (!text) return true;
  const cells = [row.name, row.key, row.status, row.parent, row.started, theseus.where(row), row.problem];
  return cells.some((cell) => cell && String(cell).toLowerCase().includes(text));
}

function render() {
  const text = document.getElementById("filter").value.trim().toLowerCase();
  const status = document.getElementById("status-filter").value;
  const body = document.querySelector("#runs tbody");
  const shown = rows.filter((row) => matches(row, text, status)).sort(compareRows);
  for (const th of document.querySelectorAll("#runs th[data-sort]")) {
    th.classList.toggle("sorted", th.dataset.sort === sortKey);
    th.dataset.direction = th.dataset.sort === sortKey ? (sortDown ? "down" : "up") : "";
  }
  body.replaceChildren(
    ...shown.map((row) => {
      const box = el("input", { type: "checkbox", "data-run": row.name });
      box.checked = selected.has(row.name);
      box.addEventListener("change", () => {
        if (box.checked) selected.add(row.name); else selected.delete(row.name);
        document.getElementById("compare").disabled = selected.size < 2;
      });
      const parentRun = row.parent ? String(row.parent).split("@")[0] : null;
      const parent = row.parent ? el("a", { href: `/runs/${encodeURIComponent(parentRun)}` }, row.parent) : "-";
      return el(
        "tr",
        { class: row.problem ? "malformed" : null, "data-run": row.name, title: row.problem },
        el("td", {}, box),
        el("td", {}, theseus.runLink(row.name)),
        el("td", {}, row.key || "-"),
        el("td", {}, theseus.badge(row.status)),
        el("td", { class: "num" }, theseus.format(row.step)),
        el("td", { class: "num" }, theseus.format(row.loss)),
        el("td", {}, parent),
        el("td", {}, row.started || "-"),
        el("td", {}, row.problem ? row.problem : theseus.where(row)),
      );
    }),
  );
  document.getElementById("count").textContent = `${shown.length} of ${rows.length} runs`;
}

function updateStatusChoices() {
  const select = document.getElementById("status-filter");
  const known = new Set([...select.options].map((o) => o.value));
  for (const status of new Set(rows.map((r) => r.status || "-"))) {
    if (!known.has(status)) select.append(el("option", { value: status }, status));
  }
}

async function refresh() {
  try {
    const answer = await theseus.get("/api/runs");
    document.getElementById("root").textContent = answer.root;
    rows = answer.runs;
    theseus.showProblems(document.getElementById("problems"), rows.length ? [] : [`no runs yet under ${answer.root}/runs`]);
    updateStatusChoices();
    render();
  } catch (error) {
    theseus.showProblems(document.getElementById("problems"), [error.message]);
  }
}

document.getElementById("filter").addEventListener("input", render);
for (const th of document.querySelectorAll("#runs th[data-sort]")) {
  th.addEventListener("click", () => {
    sortDown = th.dataset.sort === sortKey ? !sortDown : th.dataset.sort === "started";
    sortKey = th.dataset.sort;
    render();
  });
}
document.getElementById("status-filter").addEventListener("change", render);
document.getElementById("compare").addEventListener("click", () => {
  const query = [...selected].map((name) => `runs=${encodeURIComponent(name)}`).join("&");
  window.location.href = `/compare?${query}`;
});
refresh();
setInterval(refresh, 5000);
