// The usage charts of the service page's Monitoring tab: an inline SVG line chart of one
// figure per minute over the last hour, drawn from the points service.js reads from /usage.
"use strict";

const UsageChart = (() => {
  function fmt(v) {
    return v >= 100 ? String(Math.round(v)) : v >= 10 ? v.toFixed(1) : v.toFixed(2);
  }

  function niceMax(v) {
    if (v <= 0) return 1;
    const step = 10 ** Math.floor(Math.log10(v));
    return [1, 2, 2.5, 5, 10].map((m) => m * step).find((m) => m >= v);
  }

  // An inline SVG line chart: minutes on x, the value on y; null values leave gaps. `empty`
  // is what it says when every value is 0 or missing.
  function svgChart(points, unit, empty = "No data in the last hour") {
    const NS = "http://www.w3.org/2000/svg";
    const W = 600;
    const H = 180;
    const L = 48;
    const R = 10;
    const T = 10;
    const B = 24;
    const svg = document.createElementNS(NS, "svg");
    svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
    svg.setAttribute("preserveAspectRatio", "none");
    svg.setAttribute("role", "img");
    const add = (tag, attrs, text) => {
      const node = document.createElementNS(NS, tag);
      for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
      if (text !== undefined) node.textContent = text;
      svg.append(node);
      return node;
    };
    const values = points.map(([, v]) => v).filter((v) => v !== null);
    const top = niceMax(values.length ? Math.max(...values) : 0);
    const t0 = points.length ? points[0][0] : 0;
    const t1 = points.length ? points[points.length - 1][0] : 1;
    const x = (t) => L + ((t - t0) / Math.max(t1 - t0, 1)) * (W - L - R);
    const y = (v) => T + (1 - v / top) * (H - T - B);
    for (const f of [0, 0.5, 1]) {
      add("line", {x1: L, x2: W - R, y1: y(top * f), y2: y(top * f), class: f ? "grid" : "axis"});
      add("text", {x: L - 6, y: y(top * f) + 3, "text-anchor": "end"}, fmt(top * f));
    }
    const hhmm = (t) => new Date(t).toTimeString().slice(0, 5);
    for (const [t, anchor] of [[t0, "start"], [(t0 + t1) / 2, "middle"], [t1, "end"]]) {
      add("text", {x: x(t), y: H - 6, "text-anchor": anchor}, hhmm(t));
    }
    if (!values.some((v) => v > 0)) {
      add("text", {x: (L + W) / 2, y: H / 2, "text-anchor": "middle", class: "empty"},
        empty);
      return svg;
    }
    // Runs of consecutive non-null points, each drawn as its own line and area.
    let run = [];
    const flush = () => {
      if (!run.length) return;
      const line = run.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
      add("polygon", {class: "area",
        points: `${x(run[0][0]).toFixed(1)},${y(0)} ${line} ${x(run[run.length - 1][0]).toFixed(1)},${y(0)}`});
      add("polyline", {class: "line", points: line});
      if (run.length === 1) add("circle", {class: "dot", cx: x(run[0][0]), cy: y(run[0][1]), r: 2.5});
      run = [];
    };
    for (const [t, v] of points) {
      if (v === null) flush(); else run.push([t, v]);
    }
    flush();
    const last = [...points].reverse().find(([, v]) => v !== null);
    if (last) svg.append(Object.assign(document.createElementNS(NS, "title"),
      {textContent: `${hhmm(last[0])}: ${fmt(last[1])} ${unit}`}));
    return svg;
  }

  return {svg: svgChart, fmt};
})();
