// A service's LoRA adapters (the Adapters tab): each adapter's model, where it is loaded (per
// instance: loaded, loading, failed and why), its calls and tokens over the last day, and, for
// those who may change the service, adding and removing adapters (new versions, applied to
// running engines without a restart where the engine can).
"use strict";

const WharfAdapters = (() => {
  const {api, el, enc, toast} = Wharf;
  const $ = (selector) => document.querySelector(selector);
  const base = `/services/${enc(Wharf.config.service)}`;
  // The console's badge colours: as a ready, a starting and a failed instance.
  const STATES = {loaded: "ready", loading: "starting", failed: "failed", "as started": "ready"};
  let timer = null;

  function fmt(n) {
    return n >= 1e6 ? `${(n / 1e6).toFixed(1)}M` : n >= 1e3 ? `${(n / 1e3).toFixed(1)}k` : String(n);
  }

  function where(adapter) {
    if (!adapter.instances.length) return el("span.muted", "no instance yet");
    return el("div", adapter.instances.map((i) => el("div",
      el("span", {class: `badge ${STATES[i.state] || ""}`}, i.state), " ", el("code", i.instance),
      i.message ? el("span.field-error", ` ${i.message}`) : null)));
  }

  async function remove(name) {
    const result = await api("DELETE", `${base}/adapters/${enc(name)}`);
    if (!result.ok) return showError(result);
    toast(`Adapter ${name} removed; callers get model_not_found now.`);
    load();
  }

  function showError(result) {
    const box = $("#adapters-error");
    box.hidden = false;
    const errors = Object.entries((result.data && result.data.errors) || {})
      .map(([field, messages]) => `${field}: ${[].concat(messages).join(" ")}`);
    box.textContent = [(result.data && result.data.detail) || `The API answered ${result.status}.`,
      ...errors].join(" ");
  }

  async function load() {
    const since = new Date(Date.now() - 24 * 3600e3).toISOString();
    const [listed, usage] = await Promise.all([
      api("GET", `${base}/adapters`),
      api("GET", `/usage?service=${enc(Wharf.config.service)}&since=${enc(since)}&group=day`),
    ]);
    if (!listed.ok) return showError(listed);
    $("#adapters-error").hidden = true;
    const used = new Map(((usage.ok && usage.data.models) || []).map((m) => [m.adapter, m]));
    const canWrite = Boolean($("#adapter-form"));
    const rows = listed.data.adapters.map((a) => {
      const counted = used.get(a.name) || {requests: 0, total_tokens: 0};
      return el("tr", {dataset: {adapter: a.name}},
        el("td", el("code", a.name)), el("td", el("code", a.model)), el("td", where(a)),
        el("td", fmt(counted.requests)), el("td", fmt(counted.total_tokens)),
        el("td", canWrite ? el("button.btn.small", {type: "button",
          onclick: () => remove(a.name)}, "Remove") : null));
    });
    $("#svc-adapters tbody").replaceChildren(...(rows.length ? rows
      : [el("tr", el("td", {colspan: "6"}, el("span.muted", "No adapters.")))]));
  }

  async function add(event) {
    event.preventDefault();
    const form = event.target.elements;
    const result = await api("POST", `${base}/adapters`,
      {name: form.name.value.trim(), model: form.model.value.trim()});
    if (!result.ok) return showError(result);
    toast(`Adapter ${result.data.name} added.`);
    event.target.reset();
    load();
  }

  function show(visible) {
    clearInterval(timer);
    if (!visible) return;
    load();
    timer = setInterval(load, 3000);
  }

  const form = $("#adapter-form");
  if (form) form.addEventListener("submit", add);
  return {show};
})();
