// The service page's Release tab (service_release.html). The latest canary release (GET
// /services/<name>/canary): its state, its steps with the current one marked, the share of
// calls it takes now, the last judgement and both sides' figures side by side, refreshed every
// few seconds while it is active; for writers, pause, resume, promote and abort as its state
// allows, and a form that starts one (the new version's spec in the JSON editor, prefilled
// with the service's, and the steps and bounds, the API's defaults shown). Then the service's
// mirror (GET/PUT/DELETE /services/<name>/mirror): where its calls are copied, what share, and
// its own calls' figures beside each target's copies; writers set and stop it. The API's
// errors are shown by the field they name.
"use strict";

const WharfRelease = (() => {
  const {api, el, enc, badge, when, confirm, toast, config} = Wharf;
  const $ = (selector) => document.querySelector(selector);
  const base = `/services/${enc(config.service)}`;
  const ACTIVE = ["starting", "running", "paused"]; // contracts.canary.ACTIVE
  const ACTIVE_MS = 3000; // between refreshes while a canary is active
  const RESTING_MS = 10000; // and while none is
  // The hand controls each active state offers (controlplane/services/api/canary.py).
  const OFFERED = {
    starting: ["pause", "promote", "abort"],
    running: ["pause", "promote", "abort"],
    paused: ["resume", "promote", "abort"],
  };
  const CONFIRM = {
    promote: {title: "Promote the canary?", action: "Promote", message: [
      "Its spec becomes the service's as a new version and takes every call;",
      "the stable version's instances are drained."]},
    abort: {title: "Abort the canary?", action: "Abort", danger: true, message: [
      "Its instances are drained and the stable version takes every call again."]},
  };
  const DONE = {pause: "Paused", resume: "Resumed", promote: "Promoted", abort: "Aborted"};
  // Contracts.call_figures' summary, in the order a reader compares them.
  const FIGURES = [
    ["requests", "Requests"], ["errors", "Errors"], ["error_rate", "Error rate"],
    ["ttft_p50_ms", "TTFT p50"], ["ttft_p95_ms", "TTFT p95"],
    ["itl_p50_ms", "ITL p50"], ["itl_p95_ms", "ITL p95"],
  ];
  // The start form's numbers: every field of the API's body but the spec and the steps.
  const BOUNDS = Object.keys(config.canaryFields || {}).filter((n) => !["spec", "steps"].includes(n));
  const startForm = $("#canary-form");
  const mirrorForm = $("#mirror-form");
  let shown = false;
  let timer = null;
  let generation = 0; // the newest refresh; an older one schedules nothing
  let release = null; // the latest canary as the API last answered; null when none
  let editor = null;
  let editorOpened = null;
  let choicesDrawn = false;

  // ---- figures, side by side ---------------------------------------------------------------

  function figure(key, value) {
    if (value === null || value === undefined) return "—";
    if (key === "error_rate") return `${(value * 100).toFixed(2)}%`;
    return key.endsWith("_ms") ? `${value} ms` : String(value);
  }

  // A column per side ([name, heading, figures]), a row per figure.
  function figuresTable(sides) {
    return el("table.table.figures-table",
      el("thead", el("tr", el("th", "Figure"),
        sides.map(([side, heading]) => el("th", {dataset: {side}}, heading)))),
      el("tbody", FIGURES.map(([key, label]) => el("tr", {dataset: {figure: key}},
        el("th", label),
        sides.map(([side, , figures]) => el("td", {dataset: {side}},
          figure(key, (figures || {})[key])))))));
  }

  // ---- the latest canary -------------------------------------------------------------------

  const isActive = (r) => Boolean(r) && ACTIVE.includes(r.state);

  // 10% → 50% → 100%: those reached, the current one marked, and where a stopped one stood.
  function stepItems(r) {
    const serving = ["running", "paused"].includes(r.state) && r.step_started_at;
    const stopped = ["rolled_back", "aborted"].includes(r.state) && r.step_started_at;
    return r.steps.map((percent, index) => {
      const current = serving && index === r.step;
      const reached = r.state === "promoted" || index < r.step || current;
      const classes = [reached && "reached", current && "current",
        stopped && index === r.step && "stopped-at"].filter(Boolean).join(" ");
      return el("li", {class: classes || null, "aria-current": current ? "step" : null,
        dataset: {step: index}}, el("span.pill", `${percent}%`));
    });
  }

  function bounds(b) {
    return `error rate ≤ ${(b.max_error_rate * 100).toFixed(1)}%, TTFT ≤ ${b.max_ttft_ratio}× and ` +
      `ITL ≤ ${b.max_itl_ratio}× the stable side's; judged on ≥ ${b.min_requests} calls`;
  }

  function renderCanary() {
    const none = $("#canary-none");
    const latest = $("#canary-latest");
    const active = isActive(release);
    for (const button of document.querySelectorAll("[data-canary-action]")) {
      button.hidden = !active || !OFFERED[release.state].includes(button.dataset.canaryAction);
    }
    if (startForm) startForm.hidden = active;
    if ($("#canary-busy")) $("#canary-busy").hidden = !active;
    if (!release) {
      none.textContent = "No canary release yet." + (startForm ? " Start one below." : "");
      none.hidden = false;
      latest.hidden = true;
      return;
    }
    none.hidden = true;
    latest.hidden = false;
    const r = release;
    $("#canary-steps").replaceChildren(...stepItems(r));
    const rows = [
      ["State", el("span", {id: "canary-state"}, badge(r.state))],
      ["Weight", el("span", {id: "canary-weight"}, `${r.weight}% of calls to the canary`)],
      ["Interval", `${r.interval_s} s per step`],
      ["Step started", when(r.step_started_at) || "—"],
      ["Bounds", bounds(r.bounds)],
      ["Started", when(r.created_at)],
    ];
    $("#canary-summary").replaceChildren(...rows.flatMap(([k, v]) => [el("dt", k), el("dd", v)]));
    $("#canary-message").textContent = r.message || "";
    const figures = r.figures || {};
    $("#canary-figures").replaceChildren(
      figuresTable([["canary", "Canary", figures.canary], ["stable", "Stable", figures.stable]]),
      el("p.muted.small-print", "Since the step began, as last judged."));
  }

  async function act(action) {
    if (CONFIRM[action] && !(await confirm(CONFIRM[action]))) return;
    const result = await api("POST", `${base}/canary/${action}`);
    const box = $("#canary-error");
    box.hidden = result.ok;
    if (!result.ok) { box.textContent = why(result); return; }
    toast(`${DONE[action]}: ${result.data.weight}% of calls to the canary.`);
    refresh();
  }

  // ---- errors by field ---------------------------------------------------------------------

  function why(result) {
    const data = result.data || {};
    const details = Object.entries(data.errors || {})
      .map(([path, messages]) => `${path}: ${[].concat(messages).join(" ")}`);
    return [data.detail || `The API answered ${result.status}.`, ...details].join(" ");
  }

  // Each error in `root`'s slot for its path or its field ("steps" for "steps.1"); the rest
  // and, when nothing found a slot, the API's own words in `box`.
  function showErrors(root, box, result, errors) {
    for (const slot of root.querySelectorAll(".field-error[data-error-path]")) {
      slot.replaceChildren();
      slot.hidden = true;
      slot.closest(".field").classList.remove("has-error");
    }
    box.hidden = true;
    if (result.ok) return;
    const rest = [];
    for (const [path, messages] of Object.entries(errors)) {
      const text = [].concat(messages).join(" ");
      const exact = root.querySelector(`.field-error[data-error-path="${CSS.escape(path)}"]`);
      const field = path.split(/[.[]/)[0];
      const slot = exact || root.querySelector(`.field-error[data-error-path="${CSS.escape(field)}"]`);
      if (!slot) { rest.push(`${path}: ${text}`); continue; }
      slot.append(slot.childNodes.length ? " " : "", exact ? text : `${path}: ${text}`);
      slot.hidden = false;
      slot.closest(".field").classList.add("has-error");
    }
    if (rest.length || !Object.keys(errors).length) {
      box.textContent = [(result.data && result.data.detail) || `The API answered ${result.status}.`,
        ...rest].join(" ");
      box.hidden = false;
    }
  }

  // ---- starting one ------------------------------------------------------------------------

  // A number's text is the number; anything else is sent as typed, for the API to name.
  function number(text) {
    const trimmed = String(text ?? "").trim();
    if (trimmed === "") return undefined; // the API's default
    return Number.isFinite(Number(trimmed)) ? Number(trimmed) : trimmed;
  }

  const steps = (text) => {
    const words = String(text).split(/[\s,;%→]+/).filter(Boolean);
    return words.length ? words.map(number) : undefined;
  };

  async function prefill() {
    const result = await api("GET", base);
    if (!result.ok) return;
    // Secrets come back as ******; the API keeps the stored ones when they are sent back.
    editor.setValue(JSON.stringify(result.data.spec, null, 2));
    editor.showErrors({}, new Map());
  }

  async function openEditor() {
    let schema = null;
    try {
      schema = await SpecSchema.load();
    } catch { /* the editor then checks only that it is JSON; the API checks the rest */ }
    editor = JsonEditor.create($("#canary-editor"), {base: config.editor, schema,
      onChange: () => {}, note: $("#canary-editor-note"), list: $("#canary-spec-errors")});
    await prefill();
    await editor.ready;
    document.body.dataset.releaseReady = editor.mode; // wired up, on Monaco or the text area
  }

  async function start(event) {
    event.preventDefault();
    if (!editor) return;
    const parsed = JsonEditor.parse(editor.getValue());
    if (parsed.error) { editor.showErrors(parsed.error, parsed.lines); return; }
    const form = startForm.elements;
    const body = {spec: parsed.spec, steps: steps(form.steps.value)};
    for (const name of BOUNDS) body[name] = number(form[name].value);
    $("#canary-start").disabled = true;
    const result = await api("POST", `${base}/canary`, body);
    $("#canary-start").disabled = false;
    // The spec's errors at its lines in the editor (named from the spec: metadata.instance).
    const errors = (result.data && result.data.errors) || {};
    const inSpec = Object.fromEntries(Object.entries(errors).filter(([p]) => /^spec(\.|\[|$)/.test(p))
      .map(([p, m]) => [p === "spec" ? "spec" : p.replace(/^spec\.?/, ""), m]));
    const others = Object.fromEntries(Object.entries(errors).filter(([p]) => !/^spec(\.|\[|$)/.test(p)));
    editor.showErrors(result.ok ? {} : inSpec, parsed.lines);
    const placed = Object.keys(inSpec).length && !Object.keys(others).length;
    showErrors(startForm, $("#canary-form-error"), placed ? {ok: true} : result, others);
    if (!result.ok) return;
    toast(`Canary started: its instances come up beside the stable ones, then take ${result.data.steps[0]}% of calls.`);
    refresh();
  }

  // ---- the mirror --------------------------------------------------------------------------

  function renderMirror(state) {
    const on = state.targets.length > 0;
    const rows = on ? [["Targets", state.targets.join(", ")], ["Ratio", `${state.ratio}% of calls copied`]]
      : [["Mirror", "off: no call is copied"]];
    $("#mirror-summary").replaceChildren(...rows.flatMap(([k, v]) =>
      [el("dt", k), el("dd", {dataset: {mirror: k.toLowerCase()}}, v)]));
    const figures = state.figures || {};
    // A service cannot mirror to itself: its name is a side of its own.
    $("#mirror-figures").replaceChildren(...(!on ? [] : [
      figuresTable([[config.service, `${config.service} (its calls)`, figures.service],
        ...state.targets.map((t) => [t, `${t} (copies)`, (figures.targets || {})[t]])]),
      el("p.muted.small-print", figures.unavailable ? `Figures unavailable: ${figures.unavailable}`
        : `Over the last ${figures.minutes} minutes.`)]));
    if ($("#mirror-stop")) $("#mirror-stop").hidden = !on;
    if (mirrorForm && !choicesDrawn) drawChoices(state);
  }

  // The workspace's other services as targets, the current ones ticked, and the ratio.
  async function drawChoices(state) {
    choicesDrawn = true;
    const listed = await api("GET", "/services");
    if (!listed.ok) { choicesDrawn = false; return; }
    const names = listed.data.map((s) => s.name).filter((n) => n !== config.service);
    const box = $("#mirror-choices");
    if (names.length) {
      box.replaceChildren(...names.map((n) => el("label.inline", el("input", {type: "checkbox",
        name: "targets", value: n, checked: state.targets.includes(n)}), ` ${n}`)));
    }
    mirrorForm.elements.ratio.value = state.ratio || "";
  }

  async function setMirror(event) {
    event.preventDefault();
    const targets = [...mirrorForm.querySelectorAll("input[name=targets]:checked")].map((i) => i.value);
    const result = await api("PUT", `${base}/mirror`,
      {targets, ratio: number(mirrorForm.elements.ratio.value)});
    showErrors(mirrorForm, $("#mirror-error"), result, (result.data && result.data.errors) || {});
    if (!result.ok) return;
    toast(`${result.data.ratio}% of calls copied to ${result.data.targets.join(", ")}.`);
    choicesDrawn = false;
    refresh();
  }

  async function stopMirror() {
    const result = await api("DELETE", `${base}/mirror`);
    if (!Wharf.report(result, "Mirroring stopped")) return;
    choicesDrawn = false;
    refresh();
  }

  // ---- refreshing --------------------------------------------------------------------------

  async function load() {
    const [canary, mirror] = await Promise.all([
      api("GET", `${base}/canary`), api("GET", `${base}/mirror`),
    ]);
    if (canary.ok || canary.status === 404) {
      release = canary.ok ? canary.data : null;
      renderCanary();
    } else {
      $("#canary-none").textContent = why(canary);
      $("#canary-none").hidden = false;
    }
    if (mirror.ok) renderMirror(mirror.data);
    else showErrors(mirrorForm || $("#mirror-card"), $("#mirror-error"), mirror, {});
  }

  async function refresh() {
    const mine = ++generation;
    clearTimeout(timer);
    if (!document.hidden) {
      try { await load(); } catch (err) { console.error(err); }
    }
    if (mine === generation && shown) {
      timer = setTimeout(refresh, isActive(release) ? ACTIVE_MS : RESTING_MS);
    }
  }

  function show(visible) {
    shown = visible;
    clearTimeout(timer);
    if (!visible) { generation++; return; }
    refresh();
    if (startForm) editorOpened ??= openEditor();
  }

  for (const button of document.querySelectorAll("[data-canary-action]")) {
    button.addEventListener("click", () => act(button.dataset.canaryAction));
  }
  if (startForm) {
    startForm.addEventListener("submit", start);
    $("#canary-reset").addEventListener("click", () => editor && prefill());
  }
  if (mirrorForm) {
    mirrorForm.addEventListener("submit", setMirror);
    $("#mirror-stop").addEventListener("click", stopMirror);
  }
  return {show};
})();
