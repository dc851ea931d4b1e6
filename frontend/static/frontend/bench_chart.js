// The service page's benchmark charts (Monitoring tab): the runs `wharf bench` stored, each as
// output tokens per second and TTFT p50 against concurrency (static) or request rate
// (dynamic), one line per prompt/output length pair. Inline SVG; no chart library.
"use strict";

(() => {
  const {api, el, enc, when, config} = Wharf;
  const box = document.getElementById("bench-charts");
  if (!box) return;
  const NS = "http://www.w3.org/2000/svg";
  const COLORS = ["#1a66ff", "#f08c00", "#2b8a3e", "#c2255c", "#7048e8", "#0c8599"];
  const AXIS = {static: ["parallel_num", "concurrency"], dynamic: ["request_rate", "requests/s"]};
  const FIGURES = [
    {key: "output_throughput", title: "Throughput", unit: "output tokens/s"},
    {key: "ttft_ms_p50", title: "Time to first token (p50)", unit: "ms"},
  ];
  let runs = [];
  let chosen = null;

  const fmt = (v) => (v >= 100 ? String(Math.round(v)) : v >= 10 ? v.toFixed(1) : v.toFixed(2));

  function niceMax(v) {
    if (v <= 0) return 1;
    const step = 10 ** Math.floor(Math.log10(v));
    return [1, 2, 2.5, 5, 10].map((m) => m * step).find((m) => m >= v);
  }

  // Rows grouped into lines: one per length pair (static), one for a dynamic run.
  function series(run) {
    const [axis] = AXIS[run.kind];
    const lines = new Map();
    for (const row of run.rows) {
      const label = run.kind === "static" ? `${row.prompt_tokens} in / ${row.output_tokens} out` : "dataset";
      if (!lines.has(label)) lines.set(label, []);
      lines.get(label).push(row);
    }
    for (const rows of lines.values()) rows.sort((a, b) => a[axis] - b[axis]);
    return [...lines.entries()];
  }

  // Points at evenly spaced x positions, one per concurrency or rate (as ModelArts draws them).
  function chart(run, figure) {
    const [axis, axisName] = AXIS[run.kind];
    const W = 600, H = 200, L = 52, R = 12, T = 12, B = 34;
    const svg = document.createElementNS(NS, "svg");
    svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
    svg.setAttribute("preserveAspectRatio", "none");
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", `${figure.title} against ${axisName}`);
    const add = (tag, attrs, text) => {
      const node = document.createElementNS(NS, tag);
      for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
      if (text !== undefined) node.textContent = text;
      svg.append(node);
      return node;
    };
    const xs = [...new Set(run.rows.map((row) => row[axis]))].sort((a, b) => a - b);
    const values = run.rows.map((row) => row[figure.key]).filter((v) => typeof v === "number");
    const top = niceMax(values.length ? Math.max(...values) : 0);
    const x = (value) => L + (xs.length > 1 ? xs.indexOf(value) / (xs.length - 1) : 0.5) * (W - L - R);
    const y = (value) => T + (1 - value / top) * (H - T - B);
    for (const f of [0, 0.5, 1]) {
      add("line", {x1: L, x2: W - R, y1: y(top * f), y2: y(top * f), class: f ? "grid" : "axis"});
      add("text", {x: L - 6, y: y(top * f) + 3, "text-anchor": "end"}, fmt(top * f));
    }
    for (const value of xs) add("text", {x: x(value), y: H - 18, "text-anchor": "middle"}, String(value));
    add("text", {x: (L + W - R) / 2, y: H - 4, "text-anchor": "middle"}, axisName);
    series(run).forEach(([label, rows], index) => {
      const color = COLORS[index % COLORS.length];
      const points = rows.filter((row) => typeof row[figure.key] === "number");
      if (points.length > 1) {
        add("polyline", {class: "line", style: `stroke: ${color}`,
          points: points.map((row) => `${x(row[axis]).toFixed(1)},${y(row[figure.key]).toFixed(1)}`).join(" ")});
      }
      for (const row of points) {
        const dot = add("circle", {class: "dot", style: `fill: ${color}`, cx: x(row[axis]), cy: y(row[figure.key]), r: 3});
        dot.append(Object.assign(document.createElementNS(NS, "title"),
          {textContent: `${label}, ${axisName} ${row[axis]}: ${fmt(row[figure.key])} ${figure.unit}`}));
      }
    });
    if (!values.length) {
      add("text", {x: (L + W) / 2, y: H / 2, "text-anchor": "middle", class: "empty"}, "No successful requests");
    }
    return svg;
  }

  function legend(run) {
    if (run.kind !== "static") return null;
    return el("p.muted.bench-legend", series(run).map(([label], index) =>
      el("span", {style: `margin-right: 14px; color: ${COLORS[index % COLORS.length]}`}, `● ${label}`)));
  }

  function describe(run) {
    const p = run.parameters || {};
    const what = run.kind === "static"
      ? `epochs ${p.epochs ?? "?"}` : `${p.dataset_type ?? "?"} dataset ${p.dataset ?? ""}`;
    return `Run ${run.id} · ${run.kind} · ${when(run.created_at)}${run.created_by ? ` by ${run.created_by}` : ""} · ${what}`;
  }

  function render() {
    const heading = el("h2", "Benchmarks");
    if (!runs.length) {
      box.replaceChildren(el("div.card", heading, el("p.muted",
        "No benchmark runs yet. Measure this service with ",
        el("code", `wharf bench static ${config.service}`), " or ",
        el("code", `wharf bench dynamic ${config.service} --dataset FILE`),
        "; each run is stored and charted here.")));
      return;
    }
    const run = runs.find((r) => r.id === chosen) || runs[0];
    const picker = el("select", {id: "bench-run", onchange: (event) => {
      chosen = Number(event.target.value);
      render();
    }}, runs.map((r) => el("option", {value: r.id, selected: r.id === run.id}, describe(r))));
    box.replaceChildren(
      el("div.card", heading, el("label.inline", "Run ", picker), legend(run)),
      el("div.charts", FIGURES.map((figure) => el("div.card.chart", {dataset: {benchChart: figure.key}},
        el("h2", figure.title, el("small", figure.unit)), chart(run, figure)))));
  }

  async function load() {
    const result = await api("GET", `/services/${enc(config.service)}/benchmarks?limit=20`);
    if (!result.ok) {
      box.replaceChildren(el("p.field-error", (result.data && result.data.detail) || `The API answered ${result.status}.`));
      return;
    }
    runs = result.data;
    render();
  }

  const tab = document.querySelector('[data-tab="monitoring"]');
  if (tab) tab.addEventListener("click", load);
  const refresh = document.getElementById("charts-refresh");
  if (refresh) refresh.addEventListener("click", load);
  if (location.hash === "#monitoring") load();
})();
