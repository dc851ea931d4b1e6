// One service: phase and progress, instances per role, events, versions and rollback, logs,
// call information and usage charts (the online test: online_test.js; LoRA adapters:
// adapters.js; canary and mirror: canary.js). Everything is polled from the REST API; nothing reloads.
"use strict";

(() => {
  const {api, el, enc, badge, when, timeCell, engineOf, instanceSummary, progressText, copy,
    confirm, actions, config} = Wharf;
  const $ = (selector) => document.querySelector(selector);
  const name = config.service;
  const base = `/services/${enc(name)}`;
  let service = null;
  let instances = [];
  let revealedToken = null;
  let activeTab = "overview";
  let versionsOf = undefined; // the service's version the versions table was loaded at

  // ---- polling the service -----------------------------------------------------------------

  async function load() {
    const [svc, inst, events] = await Promise.all([
      api("GET", base), api("GET", `${base}/instances`), api("GET", `${base}/events?limit=200`),
    ]);
    if (svc.status === 404) return gone();
    if (!svc.ok) {
      $("#svc-progress").textContent = (svc.data && svc.data.detail) || `The API answered ${svc.status}.`;
      return;
    }
    service = svc.data;
    if (inst.ok) instances = inst.data;
    renderHeader();
    renderOverview();
    if (events.ok) renderEvents(events.data);
    if (activeTab === "versions" && service.version !== versionsOf) await loadVersions();
    renderLogChoices();
    if (activeTab === "call") renderCall();
    if (activeTab === "logs" && $("#log-follow").checked) await loadLogs();
    renderAdapterChoices();
  }

  // The online test's model choices: the service's model and each of its LoRA adapters.
  function renderAdapterChoices() {
    const select = $("#test-adapter");
    const names = ((service.spec.llm && service.spec.llm.lora && service.spec.llm.lora.adapters)
      || []).map((a) => a.name);
    const have = [...select.options].slice(1).map((o) => o.value);
    if (names.join() === have.join()) return;
    const chosen = select.value;
    select.replaceChildren(el("option", {value: ""}, "the service's model"),
      ...names.map((n) => el("option", {value: n}, `${name}:${n}`)));
    select.value = names.includes(chosen) ? chosen : "";
  }

  function gone() {
    poller.stop();
    $("#svc-phase").replaceWith(badge("deleted"));
    $("#svc-progress").textContent = "";
    const notice = $("#svc-gone");
    notice.replaceChildren("This service no longer exists. ", el("a", {href: "/"}, "Back to services"));
    notice.hidden = false;
    for (const b of document.querySelectorAll("#svc-actions .btn")) b.setAttribute("disabled", "");
  }

  function renderHeader() {
    const phase = $("#svc-phase");
    phase.className = `badge ${service.phase}`;
    phase.textContent = service.phase;
    const text = progressText(service);
    const busy = ["pending", "deploying", "updating", "stopping", "deleting"].includes(service.phase);
    $("#svc-progress").replaceChildren(busy && text ? el("span.spinner") : "", text);
    const stopped = service.desired_state === "stopped";
    const start = $("#svc-actions [data-action=start]");
    const stop = $("#svc-actions [data-action=stop]");
    if (start) start.disabled = !stopped; // a viewer has no actions
    if (stop) stop.disabled = stopped;
  }

  function resources(spec) {
    const m = spec.metadata || {};
    return [
      m.gpu ? `${m.gpu} GPU` : null, m.npu ? `${m.npu} NPU` : null,
      m.cpu ? `${m.cpu} CPU` : null, m.memory ? `${m.memory} MB` : null,
      m.shm_size ? `${m.shm_size} GB shm` : null,
    ].filter(Boolean).join(" · ") || "defaults";
  }

  function autoscaling(spec) {
    const pd = (spec.llm || {}).pd || {};
    const one = (a) => `${a.min}–${a.max} instances on ` +
      a.scaleStrategies.map((s) => `${s.metricName} ${s.threshold}`).join(", ");
    const roles = ["prefill", "decode"].filter((r) => (pd[r] || {}).autoscaler)
      .map((r) => `${r}: ${one(pd[r].autoscaler)}`);
    return [spec.autoscaler ? one(spec.autoscaler) : null, ...roles].filter(Boolean)
      .join("; ") || "off";
  }

  // Its service group (metadata.group): linked to the group's card on the groups page.
  const groupOf = (g) => el("span", {id: "svc-group"},
    el("a", {href: `/groups/#group-${enc(g.name)}`}, g.name), " ", badge(g.traffic_state),
    ` weight ${g.weight}`);

  function renderOverview() {
    const spec = service.spec || {};
    const llm = spec.llm || {};
    const rows = [
      ["Engine", engineOf(spec)],
      ["Model", llm.model || ((spec.containers || [])[0] || {}).image || "—"],
      ["Instances", `${instanceSummary(service, instances)} ready`],
      ["Autoscaler", autoscaling(spec)],
      ["Routing", ((spec.metadata || {}).rpc || {}).routing || "least_outstanding"],
      ...(service.group ? [["Group", groupOf(service.group)]] : []),
      ["Desired state", service.desired_state],
      ["Generation", `${service.observed_generation} of ${service.generation} applied`],
      ["Version", service.version ?? "—"],
      ["Resources", resources(spec)],
      ["Created", when(service.created_at)],
      ["Updated", when(service.updated_at)],
    ];
    $("#svc-summary").replaceChildren(...rows.flatMap(([k, v]) => [el("dt", k), el("dd", v)]));
    const webUi = $("#svc-webui");  // only for users with the keys right
    if (webUi) webUi.hidden = ![true, "true"].includes((spec.metadata || {}).enable_webservice);
    const error = $("#svc-error");
    error.textContent = service.last_error ? `Last error: ${service.last_error}` : "";
    error.hidden = !service.last_error;
    renderInstances();
  }

  function renderInstances() {
    const box = $("#svc-instances");
    if (!instances.length) {
      const why = service.desired_state === "stopped" ? "The service is stopped." : "No instance yet.";
      box.replaceChildren(el("p.muted.pad", {style: "padding:0 20px 16px"}, why));
      return;
    }
    const groups = Wharf.byRole(instances);
    const rows = [];
    for (const [role, list] of groups) {
      if (role) {
        const ready = list.filter((i) => i.state === "ready").length;
        rows.push(el("tr.group", el("td", {colspan: 7}, `${role} · ${ready}/${list.length} ready`)));
      }
      for (const i of list) {
        rows.push(el("tr", {dataset: {instance: i.name}},
          el("td.name", i.name),
          el("td", badge(i.state)),
          el("td", i.node),
          el("td.endpoint", i.url || "—"),
          el("td.message", i.message || ""),
          el("td", timeCell(i.updated_at)),
          el("td.right", el("button.btn.small", {onclick: () => openLogs(i.name)}, "Logs"))));
      }
    }
    box.replaceChildren(el("table.table",
      el("thead", el("tr", ["Name", "State", "Node", "Address", "Message", "Updated", ""].map((h) => el("th", h)))),
      el("tbody", rows)));
  }

  function renderEvents(events) {
    const body = $("#svc-events tbody");
    if (!events.length) {
      body.replaceChildren(el("tr", el("td.muted", {colspan: 5}, "No events yet.")));
      return;
    }
    body.replaceChildren(...events.map((e) => el("tr",
      el("td.nowrap", when(e.created_at)),
      el("td", el("span.badge", {class: /Fail|Error|WontFit|Unhealthy/.test(e.reason) ? "failed" : ""}, e.reason)),
      el("td.endpoint", e.instance || ""),
      el("td.message", e.message),
      el("td.nowrap.muted", {title: "who asked for it"}, e.actor || "Wharf"))));
  }

  // ---- versions ----------------------------------------------------------------------------

  async function loadVersions() {
    const result = await api("GET", `${base}/versions`);
    if (!result.ok) return showVersionsError(result);
    const current = result.data.find((v) => v.current);
    versionsOf = current ? current.number : null;
    renderVersions(result.data);
  }

  function renderVersions(versions) {
    const body = $("#svc-versions tbody");
    if (!versions.length) {
      body.replaceChildren(el("tr", el("td.muted", {colspan: 5}, "No versions yet.")));
      return;
    }
    body.replaceChildren(...versions.map((v) => el("tr", {dataset: {version: v.number}},
      el("td.name.nowrap", `v${v.number}`, v.current ? [" ", el("span.badge.ready", "current")] : null),
      el("td.nowrap", when(v.created_at)),
      el("td.message", v.note, Object.entries(v.hub_commits || {}).map(([model, commit]) =>
        el("div.muted", {title: commit}, `${model} at ${commit.slice(0, 12)}`))),
      el("td.endpoint", v.spec_hash),
      el("td.right", v.current || !config.rights.includes("write") ? null : el("button.btn.small",
        {onclick: () => rollBack(v.number), dataset: {rollback: v.number}}, "Roll back")))));
  }

  // The API's answer, detail and every named field, in the panel (it stays until the next try).
  function showVersionsError(result) {
    const data = result.data || {};
    const box = $("#versions-error");
    box.replaceChildren(data.detail || `The API answered ${result.status}.`,
      Object.keys(data.errors || {}).length ? el("ul", Object.entries(data.errors).map(([k, v]) =>
        el("li", el("code", k), `: ${[].concat(v).join(" ")}`))) : null);
    box.hidden = false;
  }

  async function rollBack(number) {
    const sure = await confirm({
      title: `Roll back ${name} to version ${number}?`,
      message: [`Version ${number}'s spec is saved as a new version and deployed like an update:`,
        "instances whose spec changes are replaced."],
      action: "Roll back",
    });
    if (!sure) return;
    const result = await api("POST", `${base}/rollback`, {version: number});
    if (!Wharf.report(result, `Rolling back to version ${number}`)) return showVersionsError(result);
    $("#versions-error").hidden = true;
    poller.now();
  }

  // ---- logs ----------------------------------------------------------------------------

  function renderLogChoices() {
    const select = $("#log-instance");
    const current = select.value;
    const names = instances.map((i) => i.name);
    if (names.join() === [...select.options].map((o) => o.value).join()) return;
    select.replaceChildren(...names.map((n) => el("option", {value: n}, n)));
    if (names.includes(current)) select.value = current;
  }

  async function loadLogs() {
    const instance = $("#log-instance").value;
    const pre = $("#log-text");
    if (!instance) { pre.textContent = "No instance yet."; return; }
    const result = await api("GET", `${base}/instances/${enc(instance)}/logs?tail=${enc($("#log-tail").value)}`);
    // Keep following the end unless the reader scrolled up to read.
    const atEnd = pre.scrollHeight - pre.scrollTop - pre.clientHeight < 40;
    pre.textContent = result.ok ? (result.data.logs || "(no output yet)")
      : (result.data && result.data.detail) || `The API answered ${result.status}.`;
    if (atEnd) pre.scrollTop = pre.scrollHeight;
  }

  function openLogs(instance) {
    renderLogChoices();
    $("#log-instance").value = instance;
    selectTab("logs");
  }

  // ---- call information ------------------------------------------------------------------

  function renderCall() {
    if (!service) return;
    const e = service.endpoints;
    const rows = [
      ["EAS endpoint", e.eas],
      ["OpenAI base URL", e.openai],
      ["Model", e.model],
    ];
    $("#call-endpoints").replaceChildren(...rows.flatMap(([k, v]) => [el("dt", k),
      el("dd", el("code", v), " ", el("button.btn.small", {onclick: () => copy(v)}, "Copy"))]));
    const token = revealedToken || "<TOKEN>";
    const body = JSON.stringify({model: e.model, messages: [{role: "user", content: "Hello"}], stream: true});
    const snippets = [
      ["curl, EAS path", `curl ${e.eas}/v1/chat/completions \\\n  -H "Authorization: ${token}" \\\n` +
        `  -H "Content-Type: application/json" \\\n  -d '${body}'`],
      ["curl, OpenAI path", `curl ${e.openai}/chat/completions \\\n  -H "Authorization: Bearer ${token}" \\\n` +
        `  -H "Content-Type: application/json" \\\n  -d '${body}'`],
      ["Python, OpenAI SDK", [
        "from openai import OpenAI", "",
        `client = OpenAI(base_url="${e.openai}", api_key="${token}")`,
        "stream = client.chat.completions.create(",
        `    model="${e.model}",`,
        '    messages=[{"role": "user", "content": "Hello"}],',
        "    stream=True,", ")",
        "for chunk in stream:",
        '    print(chunk.choices[0].delta.content or "", end="", flush=True)',
      ].join("\n")],
    ];
    $("#call-snippets").replaceChildren(...snippets.map(([title, text]) => el("div.snippet",
      el("h3", title), el("pre", text),
      el("button.btn.small", {onclick: () => copy(text), dataset: {snippet: title}}, "Copy"))));
  }

  async function revealToken() {
    const sure = await confirm({
      title: "Issue a new token?",
      message: [
        "Tokens are stored only as digests, so showing one means issuing a new token.",
        "The current token stops working at once: applications using it get 401 until they are given the new one.",
      ],
      action: "Issue new token", danger: true,
    });
    if (!sure) return;
    const result = await api("POST", `${base}/token`);
    if (!Wharf.report(result, null)) return;
    revealedToken = result.data.token;
    $("#token-value").textContent = revealedToken;
    $("#token-copy").hidden = false;
    $("#token-reveal").textContent = "Issue another";
    renderCall();
  }

  // ---- monitoring charts -------------------------------------------------------------------

  const CHARTS = [
    {key: "rps", title: "Requests per second", unit: "req/s",
      value: (p) => (p ? p.requests / 60 : 0)},
    {key: "latency", title: "Average latency", unit: "ms",
      value: (p) => (p && p.requests ? p.avg_latency_ms : null)},
    {key: "ttft", title: "Time to first token", unit: "ms",
      value: (p) => (p && p.requests ? p.avg_ttft_ms : null)},
    {key: "tps", title: "Output tokens per second", unit: "tokens/s",
      value: (p) => (p ? p.completion_tokens / 60 : 0)},
  ];

  const {fmt} = UsageChart;

  async function loadCharts() {
    const now = new Date();
    const since = new Date(Math.floor((now.getTime() - 3600e3) / 60e3) * 60e3);
    const result = await api("GET",
      `/usage?service=${enc(name)}&group=minute&since=${enc(since.toISOString())}`);
    const box = $("#charts");
    if (!result.ok) {
      box.replaceChildren(el("p.field-error", (result.data && result.data.detail) || `The API answered ${result.status}.`));
      return;
    }
    const byMinute = new Map(result.data.series.map((p) => [Math.floor(new Date(p.time).getTime() / 60e3), p]));
    const minutes = [];
    for (let t = since.getTime(); t < now.getTime() - 60e3 + 1; t += 60e3) minutes.push(t);
    box.replaceChildren(...CHARTS.map((chart) => {
      const points = minutes.map((t) => [t, chart.value(byMinute.get(Math.floor(t / 60e3)))]);
      const values = points.map(([, v]) => v).filter((v) => v !== null);
      const peak = values.length ? Math.max(...values) : 0;
      return el("div.card.chart", {dataset: {chart: chart.key}},
        el("h2", chart.title, el("small", peak ? `peak ${fmt(peak)} ${chart.unit}` : chart.unit)),
        UsageChart.svg(points, chart.unit));
    }));
  }

  // ---- wiring ------------------------------------------------------------------------------

  let chartTimer = null;
  function onTab(tab) {
    activeTab = tab;
    clearInterval(chartTimer);
    if (tab === "logs") loadLogs();
    if (tab === "call") renderCall();
    if (tab === "versions") loadVersions();
    WharfAdapters.show(tab === "adapters");
    WharfRelease.show(tab === "release");
    if (tab === "monitoring") {
      loadCharts();
      chartTimer = setInterval(loadCharts, 30000); // usage lands once a minute
    }
  }
  const selectTab = (tab) => {
    history.replaceState(null, "", `#${tab}`);
    selectTabRaw(tab);
  };
  const selectTabRaw = Wharf.tabs($("#svc-tabs"), onTab);

  for (const button of document.querySelectorAll("#svc-actions [data-action]")) {
    button.addEventListener("click", async () => {
      const action = button.dataset.action;
      const done = await actions[action](name);
      if (done && action === "delete") location.href = "/";
      else if (done) poller.now();
    });
  }
  $("#log-refresh").addEventListener("click", loadLogs);
  $("#log-instance").addEventListener("change", loadLogs);
  $("#log-tail").addEventListener("change", loadLogs);
  $("#token-reveal").addEventListener("click", revealToken);
  $("#token-copy").addEventListener("click", () => copy(revealedToken));
  $("#charts-refresh").addEventListener("click", loadCharts);

  const poller = Wharf.poll(load, 2000);
})();
