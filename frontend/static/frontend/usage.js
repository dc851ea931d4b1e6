// Usage across the workspace's services and keys (GET /usage): requests and tokens per
// period as charts (usage_chart.js), a row per service's model and per key, and the series as
// a CSV file. The range, service and key are the API's own filters.
"use strict";

(() => {
  const {api, el, enc} = Wharf;
  const range = document.getElementById("usage-range");
  const service = document.getElementById("usage-service");
  const key = document.getElementById("usage-key");
  const STEP = {minute: 60e3, hour: 3600e3, day: 86400e3};
  const COLUMNS = ["requests", "prompt_tokens", "completion_tokens", "total_tokens",
    "avg_latency_ms", "avg_ttft_ms"];
  const keyNames = new Map([["-", "service tokens"]]);
  let last = null;

  // One point per period from since to until, 0 where nothing was counted.
  function points(answer, figure) {
    const step = STEP[answer.group];
    const counted = new Map(answer.series.map((p) => [Date.parse(p.time), p[figure]]));
    const start = Math.floor(Date.parse(answer.since) / step) * step;
    const out = [];
    for (let t = start; t < Date.parse(answer.until); t += step) out.push([t, counted.get(t) ?? 0]);
    return out;
  }

  // The series as CSV: a header, then one line per period counted.
  function csv(answer) {
    const lines = [["time", ...COLUMNS].join(",")];
    for (const p of answer.series) lines.push([p.time, ...COLUMNS.map((c) => p[c])].join(","));
    return lines.join("\n") + "\n";
  }

  function query() {
    const chosen = range.selectedOptions[0];
    const until = new Date();
    const params = new URLSearchParams({since: new Date(until - Number(chosen.value)).toISOString(),
      until: until.toISOString(), group: chosen.dataset.group});
    if (service.value) params.set("service", service.value);
    if (key.value) params.set("key", key.value);
    return params;
  }

  const cells = (row) => COLUMNS.map((c) => el("td", c.startsWith("avg") ? `${row[c]} ms` : String(row[c])));

  async function load() {
    const result = await api("GET", `/usage?${query()}`);
    const totals = document.querySelector("#usage-totals tbody");
    if (!result.ok) {
      totals.replaceChildren(el("tr", el("td.field-error", {colspan: 8},
        (result.data && result.data.detail) || `The API answered ${result.status}.`)));
      return;
    }
    last = result.data;
    const empty = `No usage in the ${range.selectedOptions[0].textContent}`;
    document.querySelector("#chart-requests .plot").replaceChildren(
      UsageChart.svg(points(last, "requests"), "requests", empty));
    document.querySelector("#chart-tokens .plot").replaceChildren(
      UsageChart.svg(points(last, "total_tokens"), "tokens", empty));
    totals.replaceChildren(...last.models.map((m) => el("tr", {dataset: {service: m.service}},
      el("td", el("a", {href: `/services/${enc(m.service)}/`}, m.service)),
      el("td", m.adapter || el("span.muted", "base")), ...cells(m))),
      el("tr.group", el("td", "All"), el("td"), ...cells(last.totals)));
    document.querySelector("#usage-keys tbody").replaceChildren(...last.keys.map((k) =>
      el("tr", {dataset: {key: k.key_id}}, el("td", keyNames.get(k.key_id) || k.key_id), ...cells(k))));
  }

  function download() {
    if (!last) return;
    const link = el("a", {download: `wharf-usage-${last.since.slice(0, 10)}-${last.group}.csv`,
      href: URL.createObjectURL(new Blob([csv(last)], {type: "text/csv"}))});
    document.body.append(link);
    link.click();
    link.remove();
  }

  async function fillFilters() {
    const [services, keys] = await Promise.all([api("GET", "/services"), api("GET", "/keys")]);
    for (const s of services.ok ? services.data : []) service.append(el("option", {value: s.name}, s.name));
    key.append(el("option", {value: "-"}, "service tokens"));
    for (const k of keys.ok ? keys.data : []) {
      keyNames.set(k.id, `${k.name} (${k.id})`);
      key.append(el("option", {value: k.id}, `${k.name} (${k.id})`));
    }
  }

  for (const filter of [range, service, key]) filter.addEventListener("change", load);
  document.getElementById("usage-csv").addEventListener("click", download);
  fillFilters().then(load);
})();
