// The Monitoring tab's Engine table: per instance, what its engine reports (running and waiting
// requests, KV-cache usage now; prefix-cache hit rate, time to first token and generation
// tokens/s over the last minute), each with a sparkline of the last five minutes. Read from
// /services/<name>/metrics every 3 s while the tab is open (the nodes scrape every 2 s).
"use strict";

(() => {
  const {api, el, enc, badge, config} = Wharf;
  const panel = document.querySelector('[data-panel="monitoring"]');
  const box = document.querySelector("#engine-metrics");
  if (!panel || !box) return;
  const MINUTES = 5;
  const percent = (v) => `${(v * 100).toFixed(v >= 0.1 || v === 0 ? 0 : 1)}%`;
  const number = (v) => (v >= 100 ? String(Math.round(v)) : v >= 10 ? v.toFixed(1) : v.toFixed(2));
  const count = (v) => String(Math.round(v));
  const ms = (v) => `${number(v * 1000)} ms`;
  // Each column: where its figure is now (the newest sample, or the last minute's rates), how
  // it reads, and whether its sparkline is a fraction (drawn from 0 to 1).
  const COLUMNS = [
    {key: "running", title: "Running", now: (i) => i.latest && i.latest.running, fmt: count},
    {key: "waiting", title: "Waiting", now: (i) => i.latest && i.latest.waiting, fmt: count},
    {key: "kv_cache", title: "KV cache", now: (i) => i.latest && i.latest.kv_cache, fmt: percent, fraction: true},
    {key: "prefix_hit_rate", title: "Prefix-cache hits", now: (i) => i.rates.prefix_hit_rate, fmt: percent, fraction: true},
    {key: "ttft", title: "TTFT", now: (i) => i.rates.ttft, fmt: ms},
    {key: "generation_tps", title: "Generation tokens/s", now: (i) => i.rates.generation_tps, fmt: number},
  ];

  // A small inline SVG line of `points` ([time, value|null]) across the window; nulls are gaps.
  function sparkline(points, since, until, fraction) {
    const NS = "http://www.w3.org/2000/svg";
    const W = 100;
    const H = 24;
    const svg = document.createElementNS(NS, "svg");
    svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
    svg.setAttribute("preserveAspectRatio", "none");
    svg.setAttribute("class", "spark");
    svg.setAttribute("aria-hidden", "true");
    const values = points.map(([, v]) => v).filter((v) => v !== null);
    const top = fraction ? 1 : Math.max(...values, 0) || 1;
    const x = (t) => ((t - since) / Math.max(until - since, 1)) * W;
    const y = (v) => 1 + (1 - Math.min(v / top, 1)) * (H - 2);
    const base = document.createElementNS(NS, "line"); // the window, so a short line has a place
    for (const [k, v] of Object.entries({x1: 0, x2: W, y1: H - 0.5, y2: H - 0.5, class: "base"})) {
      base.setAttribute(k, v);
    }
    svg.append(base);
    let run = [];
    const flush = () => {
      if (run.length > 1) {
        const line = document.createElementNS(NS, "polyline");
        line.setAttribute("points", run.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(" "));
        svg.append(line);
      }
      run = [];
    };
    for (const [t, v] of points) {
      if (v === null || v === undefined) flush(); else run.push([t, v]);
    }
    flush();
    return svg;
  }

  function cell(instance, column, since, until) {
    const value = column.now(instance);
    const points = instance.series.map((p) => [p.time, p[column.key]]);
    return el("td.engine-figure", {dataset: {metric: column.key}},
      el("span.figure", value === null || value === undefined ? "—" : column.fmt(value)),
      points.length ? sparkline(points, since, until, column.fraction) : null);
  }

  function render(data) {
    const until = Date.now() / 1000;
    const since = until - MINUTES * 60;
    if (!data.instances.length) {
      box.replaceChildren(el("p.muted.pad", {style: "padding:0 20px 16px"}, "No instance yet."));
      return;
    }
    const rows = data.instances.map((i) => el("tr", {dataset: {instance: i.name}},
      el("td.name", i.name, el("span.sub", [i.role, i.node].filter(Boolean).join(" · "))),
      el("td", badge(i.state)),
      i.latest ? COLUMNS.map((c) => cell(i, c, since, until))
        : el("td.muted", {colspan: COLUMNS.length}, i.state === "ready"
          ? "No sample in the last 10 s: the engine's node has not scraped it (or it has no metrics page)."
          : "No sample: the instance is not ready.")));
    box.replaceChildren(el("table.table.engine-table",
      el("thead", el("tr", ["Instance", "State", ...COLUMNS.map((c) => c.title)].map((h) => el("th", h)))),
      el("tbody", rows)));
  }

  async function load() {
    if (panel.hidden) return;
    const result = await api("GET", `/services/${enc(config.service)}/metrics?minutes=${MINUTES}`);
    if (!result.ok) {
      box.replaceChildren(el("p.field-error.pad", {style: "padding:0 20px 16px"},
        (result.data && result.data.detail) || `The API answered ${result.status}.`));
      return;
    }
    render(result.data);
  }

  const poller = Wharf.poll(load, 3000);
  // Opening the tab reads at once rather than at the next tick.
  new MutationObserver(() => { if (!panel.hidden) poller.now(); })
    .observe(panel, {attributes: true, attributeFilter: ["hidden"]});
})();
