// theseus serve: helpers every page uses. No framework; every text goes in through textContent.
"use strict";

const theseus = {
  async get(path) {
    const response = await fetch(path, { headers: { Accept: "application/json" } });
    let body = null;
    try { body = await response.json(); } catch (error) { body = null; }
    if (!response.ok) {
      const message = body && body.error ? body.error : `${response.status} ${response.statusText}`;
      throw new Error(message);
    }
    return body;
  },

  el(tag, attributes = {}, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attributes)) {
      if (value === null || value === undefined) continue;
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else node.setAttribute(key, value);
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  },

  runLink(name) {
    return theseus.el("a", { href: `/runs/${encodeURIComponent(name)}` }, name);
  },

  badge(status) {
    const text = status || "-";
    return theseus.el("span", { class: `badge ${text}` }, text);
  },

  // JSON cannot carry NaN or infinities: the API sends them as strings.
  number(value) {
    if (value === "NaN") return NaN;
    if (value === "Infinity") return Infinity;
    if (value === "-Infinity") return -Infinity;
    return typeof value === "number" ? value : null;
  },

  format(value) {
    if (value === null || value === undefined) return "-";
    const number = theseus.number(value);
    if (number === null) return typeof value === "object" ? JSON.stringify(value) : String(value);
    if (!Number.isFinite(number)) return String(number);
    if (Number.isInteger(number)) return String(number);
    return Math.abs(number) >= 1e-3 && Math.abs(number) < 1e5 ? number.toFixed(4) : number.toExponential(3);
  },

  where(row) {
    if (row.dispatched && row.dispatched.target) {
      const d = row.dispatched;
      return `${d.target} [${d.type || "?"}]` + (d.job_id ? ` job ${d.job_id}` : "");
    }
    return row.host ? `local (${row.host})` : "-";
  },

  showProblems(container, problems) {
    container.replaceChildren(...(problems || []).map((p) => theseus.el("div", {}, p)));
  },

  async showRoot() {
    const slot = document.getElementById("root");
    if (!slot) return;
    try { slot.textContent = (await theseus.get("/api/runs")).root; } catch (error) { slot.textContent = ""; }
  },

  // Each metric of one run as {x, y}, decimated by the server to about `maxPoints`, with the
  // cursor (`offset`, `version`) to follow the file from.
  async series(name, metrics = [], maxPoints = 4000) {
    const query = new URLSearchParams(metrics.map((m) => ["metric", m]));
    query.set("max_points", String(maxPoints));
    const answer = await theseus.get(`/api/runs/${encodeURIComponent(name)}/series?${query}`);
    for (const entry of Object.values(answer.series)) entry.y = entry.y.map(theseus.plotted);
    return answer;
  },

  // A value as a chart takes it: NaN and infinities become gaps.
  plotted(value) {
    const number = theseus.number(value);
    return number !== null && Number.isFinite(number) ? number : null;
  },

  // New metric rows of one run, polled with a row cursor from `start` ({offset, version});
  // `onRows(rows, reset)`, where `reset` means the file was rewritten (a resume) and the
  // caller should start over. Returns a function that stops it.
  follow(name, onRows, intervalMs = 2000, start = { offset: 0, version: "" }) {
    let offset = start.offset;
    let version = start.version;
    let stopped = false;
    const poll = async () => {
      if (stopped) return;
      try {
        const query = `offset=${offset}&version=${encodeURIComponent(version)}`;
        const answer = await theseus.get(`/api/runs/${encodeURIComponent(name)}/metrics?${query}`);
        version = answer.version;
        offset = answer.offset;
        if (!stopped && (answer.rows.length || answer.reset)) onRows(answer.rows, answer.reset);
      } catch (error) {
        console.warn(`metrics of ${name}: ${error.message}`);
      }
      if (!stopped) setTimeout(poll, intervalMs);
    };
    setTimeout(poll, intervalMs);
    return () => { stopped = true; };
  },

  chartLayout(title) {
    return {
      title: { text: title, font: { size: 13 }, x: 0.01, xanchor: "left" },
      margin: { l: 55, r: 15, t: 40, b: 40 },
      xaxis: { title: { text: "step" } },
      showlegend: false,
    };
  },
};
