// The deploy page: the LLM scenario form, the custom form and the JSON editor, all read from
// the spec's schema (spec_schema.js, spec_form.js, json_editor.js), with a run command preview
// (POST /services/preview) and the exact spec that deploys beside them. The schema's
// objections show at their fields before anything is sent; the API's {"errors": {"<path>":
// [...]}} show at their fields and editor lines after.
"use strict";

(() => {
  const {api, el, enc, shellQuote, debounce, dialog, copy, config} = Wharf;
  const $ = (selector, root) => (root || document).querySelector(selector);
  const llmForm = $("#form-llm");
  const customForm = $("#form-custom");
  const freeEdit = $("#free-edit");
  const editCommand = $("#edit-command");
  const previewCommand = $("#preview-command");
  const generalErrors = $("#general-errors");
  const editing = config.edit || "";
  const STAND_IN = "my-service"; // the preview needs a valid name; an unnamed form uses this
  let mode = "llm";
  let lastPlan = null; // the last preview's container: image, port, env for a free edit
  let schema = null;
  let editor = null;

  // ---- reading the forms -------------------------------------------------------------------

  // Option values: a number's text is the number, anything else is sent as typed.
  function num(value) {
    const text = String(value ?? "").trim();
    if (text === "") return undefined;
    return Number.isFinite(Number(text)) ? Number(text) : text;
  }

  const flag = (name) => (/^-/.test(name) ? name : `--${name}`);

  // llm.options: flags the spec has no field for, with a value or switched on.
  function readOptions() {
    const options = {};
    for (const row of document.querySelectorAll("#llm-options .pair")) {
      const name = row.querySelector("[name=option-name]").value.trim();
      if (name) options[flag(name)] = num(row.querySelector("[name=option-value]").value) ?? "";
    }
    for (const row of document.querySelectorAll("#llm-flags .pair")) {
      const name = row.querySelector("[name=flag-name]").value.trim();
      if (name) options[flag(name)] = true;
    }
    return options;
  }

  function llmSpec() {
    const read = SpecForm.read(llmForm);
    const options = readOptions();
    if (Object.keys(options).length) SpecSchema.put(read.spec, "llm.options", options);
    return read;
  }

  // The edited command deploys verbatim, with the image, port and environment the preview
  // showed; the adapter's own speculative flags are already in the command.
  function withEditedCommand(spec) {
    const plan = lastPlan || {};
    const env = Object.entries(plan.env || {}).map(([name, value]) => ({name, value}));
    const port = (spec.containers && spec.containers[0] && spec.containers[0].port) ?? plan.port;
    const container = {image: plan.image, command: editCommand.value.trim(), port};
    if (env.length) container.env = env;
    for (const key of Object.keys(container)) if (container[key] === undefined) delete container[key];
    const edited = structuredClone(spec);
    edited.containers = [container, ...(spec.containers || []).slice(1)]; // sidecars stay
    if (edited.llm) delete edited.llm.speculative;
    return edited;
  }

  // {spec, errors} of the tab in view; {error, lines} when the JSON does not parse.
  function currentSpec() {
    if (mode === "llm") return llmSpec();
    if (mode === "custom") return SpecForm.read(customForm);
    const parsed = JsonEditor.parse(editor.getValue());
    return parsed.error ? parsed : {...parsed, errors: {}};
  }

  // What the Deploy button sends.
  function deployable(current) {
    return mode === "llm" && freeEdit.checked ? withEditedCommand(current.spec) : current.spec;
  }

  const formInView = () => (mode === "llm" ? llmForm : customForm);

  // ---- the preview ---------------------------------------------------------------------------

  function formatCommand(plan) {
    const args = plan.command || [];
    // A given command runs as `/bin/sh -c LINE`: the line is what the user wrote.
    if (args.length === 3 && args[0] === "/bin/sh" && args[1] === "-c") return args[2];
    const lines = [];
    for (const arg of args) {
      if (arg.startsWith("--") || !lines.length) lines.push([shellQuote(arg)]);
      else lines[lines.length - 1].push(shellQuote(arg));
    }
    return lines.map((words) => words.join(" ")).join(" \\\n  ");
  }

  function size(bytes) {
    if (!bytes) return null;
    return bytes >= 1024 ** 3 ? `${+(bytes / 1024 ** 3).toFixed(1)} GiB` : `${Math.round(bytes / 1024 ** 2)} MiB`;
  }

  function showPlan(plan) {
    lastPlan = plan;
    if (!freeEdit.checked) previewCommand.textContent = formatCommand(plan);
    previewCommand.classList.remove("stale");
    const rows = [
      ["Image", plan.image],
      ["Port", plan.port],
      ["Env", Object.entries(plan.env || {}).map(([k, v]) => `${k}=${v}`).join("\n")],
      ["Mounts", (plan.mounts || []).map((m) =>
        `${m.target} ← ${m.kind}${m.source ? ` ${m.source}` : ""}${m.size_bytes ? ` (${size(m.size_bytes)})` : ""}`).join("\n")],
      ["Shared memory", size(plan.shm_size_bytes)],
      ["CPU", plan.cpus],
      ["Memory", size(plan.memory_bytes)],
      ["Cards", [...(plan.gpus || []).map((g) => `GPU ${g}`), ...(plan.device_paths || [])].join(", ")],
      // The instance's other containers (sidecars), each beside the main one on localhost.
      ...(plan.sidecars || []).map((s) => [`containers[${s.index}]`,
        `${s.image}${s.port ? ` (port ${s.port})` : ""}\n` +
        (s.command.length ? formatCommand(s) : "its image's entrypoint")]),
    ].filter(([, v]) => v !== null && v !== undefined && v !== "");
    $("#preview-details").replaceChildren(...rows.flatMap(([k, v]) =>
      [el("dt", k), el("dd", {style: "white-space:pre-wrap"}, String(v))]));
  }

  function showPreviewErrors(errors) {
    const list = $("#preview-errors");
    const entries = Object.entries(errors || {});
    list.replaceChildren(...entries.map(([path, m]) =>
      el("li", el("code.path", path), " ", [].concat(m).join(" "))));
    list.hidden = !entries.length;
    if (entries.length) previewCommand.classList.add("stale");
  }

  function showErrors(errors, current, onlyTouched) {
    if (mode === "json") {
      editor.showErrors(errors, current.lines);
      return {};
    }
    return SpecForm.showErrors(formInView(), errors, onlyTouched);
  }

  let previewSeq = 0;
  const refreshPreview = debounce(async () => {
    if (!editor) return;
    const seq = ++previewSeq;
    const current = currentSpec();
    if (current.error) {
      $("#preview-spec").textContent = "";
      showPreviewErrors(current.error);
      showErrors(current.error, current);
      return;
    }
    $("#preview-spec").textContent = JSON.stringify(deployable(current), null, 2);
    const spec = {...current.spec, name: current.spec.name || STAND_IN};
    const objections = {...current.errors};
    if (!current.spec.name) delete objections.name;
    if (Object.keys(objections).length) { // the schema's: nothing to ask the API yet
      showPreviewErrors(objections);
      showErrors(objections, current, true);
      return;
    }
    const result = await api("POST", "/services/preview", spec);
    if (seq !== previewSeq) return; // a newer change already asked again
    const errors = result.ok ? {} : (result.data && result.data.errors) || {spec: [result.data.detail]};
    if (result.ok) showPlan(result.data.containers[0]);
    showPreviewErrors(errors);
    showErrors(errors, current, true);
  }, 350);

  // ---- deploying -----------------------------------------------------------------------------

  function showGeneral(detail, errors) {
    const entries = Object.entries(errors || {});
    if (!detail && !entries.length) { generalErrors.hidden = true; return; }
    const list = el("ul", entries.map(([path, m]) =>
      el("li", el("code", path), ": ", [].concat(m).join(" "))));
    generalErrors.replaceChildren(el("strong", detail || "The spec has errors."));
    if (entries.length) generalErrors.append(list);
    generalErrors.hidden = false;
  }

  function scrollToFirstError() {
    const first = document.querySelector(".field-error, #json-errors li");
    if (first) first.scrollIntoView({block: "center", behavior: "smooth"});
  }

  async function deploy() {
    const button = $("#deploy");
    const status = $("#deploy-status");
    const current = currentSpec();
    showGeneral();
    if (current.error) {
      showErrors(current.error, current);
      return;
    }
    if (Object.keys(current.errors).length) {
      const unplaced = showErrors(current.errors, current);
      showGeneral("Some fields do not fit the spec's schema; nothing was sent.", unplaced);
      scrollToFirstError();
      return;
    }
    const spec = deployable(current);
    button.disabled = true;
    status.textContent = editing ? "Updating…" : "Deploying…";
    const result = editing
      ? await api("PUT", `/services/${enc(editing)}`, spec)
      : await api("POST", "/services", spec);
    button.disabled = false;
    status.textContent = "";
    if (!result.ok) {
      const data = result.data || {};
      const unplaced = showErrors(data.errors || {}, current);
      showGeneral(data.detail || `The API answered ${result.status}.`, unplaced);
      scrollToFirstError();
      return;
    }
    const name = result.data.name;
    if (result.data.token) await showToken(name, result.data.token);
    location.href = `/services/${enc(name)}/`;
  }

  async function showToken(name, token) {
    await dialog({
      title: `Service ${name} created`,
      body: [
        el("p", "Its token is shown only now; applications send it as Authorization: Bearer <token>."),
        el("code.secret", {id: "created-token"}, token),
        el("p", {style: "margin-top:10px"}, el("button.btn.small", {type: "button",
          onclick: () => copy(token)}, "Copy token")),
        el("p.muted", "Lost it? Call information on the service page issues a new one."),
      ],
      buttons: [{value: "open", label: "Open service", class: "primary"}],
    });
  }

  // ---- rows: options, flags, environment variables, mounts ---------------------------------

  function removable(row) {
    row.append(el("button.btn.icon", {type: "button", title: "Remove",
      onclick: () => { row.remove(); refreshPreview(); }}, "✕"));
    return row;
  }

  function addOption(name, value) {
    $("#llm-options").append(removable(el("div.pair",
      el("input", {name: "option-name", placeholder: "--block-size", value: name || ""}),
      el("input", {name: "option-value", placeholder: "value", value: value ?? ""}))));
  }

  function addFlag(name) {
    $("#llm-flags").append(removable(el("div.pair",
      el("input", {name: "flag-name", placeholder: "--enable-prefix-caching", value: name || ""}))));
  }

  function addEnv() {
    const list = $("#custom-env");
    list.append(removable(SpecForm.row(list, schema, ["name", "value"])));
  }

  function addAdapter() {
    const list = $("#llm-adapters");
    list.append(removable(SpecForm.row(list, schema, ["name", "model"])));
  }

  // A mount: its path, its kind (the schema's storage sources) and the fields the template
  // lists for that kind.
  function addMount() {
    const list = $("#custom-mounts");
    const shownFields = Object.fromEntries(list.dataset.kinds.split(" ").map((entry) => {
      const [kind, names] = entry.split(":");
      return [kind, names.split(",")];
    }));
    const kinds = SpecSchema.objectMembers(schema, "storage[0]").filter((k) => k in shownFields);
    const kind = el("select", {dataset: {role: "kind"}, "aria-label": "Source"},
      kinds.map((k) => el("option", {value: k}, k)));
    const row = removable(SpecForm.row(list, schema, ["mount_path"], kind));
    const fill = () => {
      for (const node of row.querySelectorAll("[data-kind-field]")) node.remove();
      const fields = SpecForm.row(list, schema, shownFields[kind.value].map((n) => `${kind.value}.${n}`));
      for (const node of [...fields.children]) {
        node.dataset.kindField = "";
        row.insertBefore(node, row.querySelector(":scope > .btn.icon"));
      }
      row.dataset.objects = kind.value;
    };
    kind.addEventListener("change", fill);
    fill();
    list.append(row);
  }

  // ---- wiring --------------------------------------------------------------------------------

  // The LLM form's cards follow the engine: GPUs, NPUs or none (config.engineCards, from the
  // spec's rules). A switched-off section is left out (data-when), and so are the fields a
  // switched-on one replaces (data-unless: prefill/decode roles have their own counts).
  function applyEngine() {
    const kind = config.engineCards[llmForm.elements["llm.engine"].value] || null;
    const on = (name) => llmForm.elements[name].checked;
    for (const node of llmForm.querySelectorAll("[data-cards], [data-when], [data-unless]")) {
      node.hidden = ("cards" in node.dataset && node.dataset.cards !== kind)
        || ("when" in node.dataset && !on(node.dataset.when))
        || ("unless" in node.dataset && on(node.dataset.unless));
    }
  }

  function wireForms() {
    for (const form of [llmForm, customForm]) {
      SpecForm.track(form);
      form.addEventListener("submit", (e) => e.preventDefault());
      form.addEventListener("input", refreshPreview);
      form.addEventListener("change", refreshPreview);
    }
    llmForm.addEventListener("change", applyEngine);
    $("#add-option").addEventListener("click", () => addOption());
    $("#add-flag").addEventListener("click", () => addFlag());
    $("#add-env").addEventListener("click", addEnv);
    $("#add-adapter").addEventListener("click", addAdapter);
    $("#add-mount").addEventListener("click", addMount);
  }

  function wireJson() {
    $("#json-file").addEventListener("change", async (event) => {
      const file = event.target.files[0];
      if (!file) return;
      editor.setValue(await file.text());
      event.target.value = "";
      refreshPreview();
    });
    $("#json-format").addEventListener("click", () => {
      const parsed = JsonEditor.parse(editor.getValue());
      if (parsed.error) { editor.showErrors(parsed.error, parsed.lines); return; }
      editor.setValue(JSON.stringify(parsed.spec, null, 2));
      refreshPreview();
    });
    $("#json-from-form").addEventListener("click", () => {
      editor.setValue(JSON.stringify(llmSpec().spec, null, 2));
      refreshPreview();
    });
  }

  freeEdit.addEventListener("change", () => {
    const on = freeEdit.checked;
    if (on) editCommand.value = previewCommand.textContent;
    editCommand.hidden = !on;
    previewCommand.hidden = on;
    $("#free-edit-note").hidden = !on;
    refreshPreview(); // back off: the command the form renders; edits are dropped
  });
  editCommand.addEventListener("input", refreshPreview);
  $("#deploy").addEventListener("click", deploy);

  const FIRST_SPEC = {
    name: STAND_IN,
    llm: {engine: "vllm-cpu", model: "tiny-llama", max_model_len: 512},
    metadata: {instance: 1, cpu: 2, memory: 8000},
  };

  async function start() {
    try {
      schema = await SpecSchema.load();
      SpecForm.render(llmForm, schema);
      SpecForm.render(customForm, schema);
      wireForms();
      applyEngine();
      ModelPicker.attach(llmForm); // its nodes' models arrive when they do
    } catch (err) {
      // The JSON editor needs no schema to deploy; the forms cannot be drawn without it.
      showGeneral(`The spec's schema did not load (${err.message}); the forms need it. ` +
        "The JSON editor still deploys.");
      for (const b of document.querySelectorAll("#deploy-tabs [data-tab]")) b.hidden = b.dataset.tab !== "json";
      history.replaceState(null, "", "#json");
    }
    editor = JsonEditor.create($("#json-editor"), {base: config.editor, schema,
      onChange: refreshPreview, note: $("#json-editor-note"), list: $("#json-errors")});
    editor.setValue(JSON.stringify(FIRST_SPEC, null, 2));
    wireJson();
    // Updating opens straight on the JSON editor, the one view of every field of a stored spec.
    if (editing) history.replaceState(null, "", "#json");
    Wharf.tabs($("#deploy-tabs"), (name) => {
      mode = name;
      // Free editing belongs to the LLM form's rendered command.
      freeEdit.closest("label.inline").hidden = name !== "llm";
      if (name !== "llm" && freeEdit.checked) { freeEdit.checked = false; freeEdit.dispatchEvent(new Event("change")); }
      showGeneral();
      refreshPreview();
    });
    if (editing) await loadStored();
    await editor.ready;
    document.body.dataset.deployReady = editor.mode; // wired up, on Monaco or the text area
  }

  // Updating: the stored spec in the JSON editor; PUT keeps stored secrets sent as ******.
  async function loadStored() {
    $("#deploy-title").textContent = `Update ${editing}`;
    $("#deploy").textContent = "Update";
    for (const b of document.querySelectorAll("#deploy-tabs [data-tab]")) b.hidden = b.dataset.tab !== "json";
    const result = await api("GET", `/services/${enc(editing)}`);
    if (!result.ok) { showGeneral(result.data && result.data.detail); return; }
    editor.setValue(JSON.stringify(result.data.spec, null, 2));
    refreshPreview();
  }

  start();
})();
