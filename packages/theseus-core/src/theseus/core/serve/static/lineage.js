// Lineage: runs as boxes; a solid line from each parent to each run branched from it
// (--branch RUN@STEP), a dashed one from each run to the runs whose config names it
// (init.checkpoint, evaluate.checkpoint, hf.run...). A tidy tree per first run, laid out
// left to right; drawn as SVG without a library.
"use strict";

const { el } = theseus;
const SVG = "http://www.w3.org/2000/svg";
const W = 210, H = 34, GAP_X = 170, GAP_Y = 16;

function svg(tag, attributes = {}, text = null) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, value);
  if (text !== null) node.textContent = text;
  return node;
}

function layout(nodes, edges, everyRun) {
  const byName = new Map(nodes.map((n) => [n.name, n]));
  const children = new Map();
  const hasParent = new Set();
  for (const edge of edges) {
    if (!byName.has(edge.from)) continue; // a parent that is not under this root
    if (!children.has(edge.from)) children.set(edge.from, []);
    children.get(edge.from).push(edge.to);
    hasParent.add(edge.to);
  }
  const roots = nodes.filter((n) => !hasParent.has(n.name) && (everyRun || children.has(n.name) || n.parent_run));
  const position = new Map();
  let row = 0;
  const place = (name, depth, seen) => {
    if (seen.has(name)) return; // a cycle in damaged records: draw each run once
    seen.add(name);
    position.set(name, { x: depth * (W + GAP_X), y: row * (H + GAP_Y) });
    const kids = (children.get(name) || []).slice().sort();
    if (!kids.length) row += 1;
    for (const kid of kids) place(kid, depth + 1, seen);
  };
  const seen = new Set();
  for (const root of roots.sort((a, b) => String(a.started).localeCompare(String(b.started)))) place(root.name, 0, seen);
  return position;
}

function draw(graph, everyRun) {
  const position = layout(graph.nodes, graph.edges, everyRun);
  const container = document.getElementById("graph");
  if (!position.size) {
    container.replaceChildren(el("p", { class: "muted" }, "no run was branched from or made from another yet (--branch RUN@STEP, init.checkpoint=RUN@STEP ...)"));
    return;
  }
  const width = Math.max(...[...position.values()].map((p) => p.x)) + W + 20;
  const height = Math.max(...[...position.values()].map((p) => p.y)) + H + 20;
  const root = svg("svg", { width, height, viewBox: `-10 -10 ${width} ${height}`, id: "lineage-svg" });
  for (const edge of graph.edges) {
    const a = position.get(edge.from), b = position.get(edge.to);
    if (!a || !b) continue;
    const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2, mid = (x1 + x2) / 2;
    const kind = edge.via === "branch" ? "edge" : "edge derived";
    root.append(svg("path", { class: kind, d: `M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2},${y2}`, "data-via": edge.via }));
    const step = edge.step === null ? "" : `@${edge.step}`;
    const label = edge.via === "branch" ? step : `${edge.via}${step ? " " + step : ""}`;
    if (label) root.append(svg("text", { x: x1 + 4, y: y2 - 4, fill: "#6b7585" }, label));
  }
  const byName = new Map(graph.nodes.map((n) => [n.name, n]));
  for (const [name, p] of position) {
    const node = byName.get(name);
    const link = svg("a", { href: `/runs/${encodeURIComponent(name)}` });
    const group = svg("g", { class: `node ${node.status}`, transform: `translate(${p.x},${p.y})`, "data-run": name });
    group.append(svg("rect", { width: W, height: H }));
    group.append(svg("text", { x: 8, y: 14 }, name.length > 30 ? `${name.slice(0, 29)}…` : name));
    group.append(svg("text", { x: 8, y: 28, fill: "#6b7585" }, `${node.status || "-"} · ${node.key || "?"}`));
    link.append(group);
    root.append(link);
  }
  container.replaceChildren(root);
}

async function refresh() {
  try {
    const graph = await theseus.get("/api/lineage");
    draw(graph, document.getElementById("all-runs").checked);
  } catch (error) {
    theseus.showProblems(document.getElementById("problems"), [error.message]);
  }
}

document.getElementById("all-runs").addEventListener("change", refresh);
theseus.showRoot();
refresh();
setInterval(refresh, 10000);
