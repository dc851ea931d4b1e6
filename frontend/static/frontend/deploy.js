// The deploy page: the LLM scenario form, the custom form and the JSON editor, with a run
// command preview (POST /services/preview) beside them. The API validates everything; the
// page only maps its {"errors": {"<path>": [...]}} back onto fields and editor lines.
"use strict";

(() => {
  const {api, el, enc, shellQuote, debounce, dialog, copy, config} = Wharf;
  const $ = (selector, root) => (root || document).querySelector(selector);
  const llmForm = $("#form-llm");
  const customForm = $("#form-custom");
  const jsonText = $("#json-text");
  const gutter = $("#json-editor .gutter");
  const freeEdit = $("#free-edit");
  const editCommand = $("#edit-command");
  const previewCommand = $("#preview-command");
  const generalErrors = $("#general-errors");
  const GPU_ENGINES = ["vllm", "bladellm", "tgi", "paddlenlp"];
  const ENGINE_HINTS = {
    "vllm": "vLLM on NVIDIA GPUs.",
    "vllm-cpu": "vLLM's CPU build: no cards needed.",
    "vllm-ascend": "vLLM with the Ascend plugin, on NPUs.",
    "bladellm": "PAI's BladeLLM server, on GPUs.",
    "tgi": "Hugging Face Text Generation Inference, on GPUs.",
    "paddlenlp": "PaddleNLP's serving, on GPUs.",
  };
  const editing = config.edit || "";
  let mode = "llm";
  let lastPlan = null; // the last preview's container: image, port, env for a free edit

  // ---- reading the forms -----------------------------------------------------------------

  // "" → undefined; a number → Number; anything else is sent as typed so the API names it.
  function num(value) {
    const text = String(value ?? "").trim();
    if (text === "") return undefined;
    return Number.isFinite(Number(text)) ? Number(text) : text;
  }

  function prune(object) {
    for (const [key, value] of Object.entries(object)) {
      if (value === undefined) delete object[key];
      else if (value && typeof value === "object" && !Array.isArray(value)) {
        prune(value);
        if (!Object.keys(value).length) delete object[key];
      }
    }
    return object;
  }

  const flag = (name) => (/^-/.test(name) ? name : `--${name}`);

  function llmSpec() {
    const f = llmForm.elements;
    const engine = f.engine.value;
    const cards = num(f.cards.value);
    const llm = {
      engine,
      model: f.model.value.trim() || undefined,
      served_model_name: f.served_model_name.value.trim() || undefined,
      tensor_parallel_size: num(f.tensor_parallel_size.value),
      max_model_len: num(f.max_model_len.value),
      gpu_memory_utilization: num(f.gpu_memory_utilization.value),
      chunked_prefill_size: num(f.chunked_prefill_size.value),
    };
    if (f.speculative.checked) {
      llm.speculative = {
        model: f.draft_model.value.trim() || undefined,
        num_speculative_tokens: num(f.num_speculative_tokens.value),
      };
    }
    // Prefill/decode separation, sent only when switched on: instances and cards per role
    // (GPUs, NPUs on vllm-ascend; none on vllm-cpu).
    if (f.pd.checked) {
      const kind = engine === "vllm-ascend" ? "npu" : GPU_ENGINES.includes(engine) ? "gpu" : null;
      const role = (instances, cards) => {
        const side = {instance: num(instances.value)};
        if (kind) side[kind] = num(cards.value);
        return side;
      };
      llm.pd = {
        prefill: role(f.pd_prefill_instances, f.pd_prefill_cards),
        decode: role(f.pd_decode_instances, f.pd_decode_cards),
      };
    }
    const options = {};
    for (const row of document.querySelectorAll("#llm-options .pair")) {
      const name = row.querySelector("[name=option-name]").value.trim();
      if (name) options[flag(name)] = num(row.querySelector("[name=option-value]").value) ?? "";
    }
    for (const row of document.querySelectorAll("#llm-flags .pair")) {
      const name = row.querySelector("[name=flag-name]").value.trim();
      if (name) options[flag(name)] = true;
    }
    if (Object.keys(options).length) llm.options = options;
    const metadata = {
      instance: num(f.instance.value),
      cpu: num(f.cpu.value),
      memory: num(f.memory.value),
      shm_size: num(f.shm_size.value),
    };
    if (GPU_ENGINES.includes(engine)) metadata.gpu = cards ?? 0;
    if (engine === "vllm-ascend") metadata.npu = cards ?? 0;
    const spec = {name: f.name.value.trim(), llm, metadata};
    const port = num(f.port.value);
    if (port !== undefined) spec.containers = [{port}];
    return prune(spec);
  }

  // The edited command deploys verbatim, with the image, port and environment the preview
  // showed; the adapter's own speculative flags are already in the command.
  function withEditedCommand(spec) {
    const plan = lastPlan || {};
    const env = Object.entries(plan.env || {}).map(([name, value]) => ({name, value}));
    spec.containers = [prune({image: plan.image, command: editCommand.value.trim(),
      port: (spec.containers && spec.containers[0] && spec.containers[0].port) ?? plan.port,
      env: env.length ? env : undefined})];
    delete spec.llm.speculative;
    return spec;
  }

  function customSpec() {
    const f = customForm.elements;
    const env = [...document.querySelectorAll("#custom-env .pair")].map((row) => ({
      name: row.querySelector("[name=env-name]").value.trim(),
      value: row.querySelector("[name=env-value]").value,
    })).filter((e) => e.name);
    const storage = [...document.querySelectorAll("#custom-mounts .pair")].map((row) => {
      const kind = row.querySelector("[name=mount-kind]").value;
      const mount_path = row.querySelector("[name=mount-path]").value.trim();
      const source = row.querySelector("[name=mount-source]").value.trim();
      if (kind === "memory") return {mount_path, empty_dir: prune({medium: "memory", size_limit: num(source)})};
      return {mount_path, [kind]: {path: source}};
    }).filter((s) => s.mount_path);
    const spec = {
      name: f.name.value.trim(),
      containers: [prune({
        image: f.image.value.trim() || undefined,
        command: f.command.value.trim() || undefined,
        port: num(f.port.value),
        env: env.length ? env : undefined,
      })],
      storage: storage.length ? storage : undefined,
      metadata: {instance: num(f.instance.value), gpu: num(f.gpu.value), cpu: num(f.cpu.value),
        memory: num(f.memory.value), shm_size: num(f.shm_size.value)},
    };
    return prune(spec);
  }

  // ---- JSON editor: comments, line numbers, error paths → lines ---------------------------

  // Blanks out // and /* */ comments (EAS's examples carry them), keeping every newline so
  // positions and line numbers still match the text the user sees.
  function stripComments(text) {
    let out = "";
    let inString = false;
    for (let i = 0; i < text.length; i++) {
      const c = text[i];
      if (inString) {
        out += c;
        if (c === "\\") { out += text[++i] ?? ""; } else if (c === '"') inString = false;
      } else if (c === '"') { inString = true; out += c; }
      else if (c === "/" && text[i + 1] === "/") {
        while (i < text.length && text[i] !== "\n") { out += " "; i++; }
        out += text[i] ?? "";
      } else if (c === "/" && text[i + 1] === "*") {
        while (i < text.length && !(text[i] === "*" && text[i + 1] === "/")) {
          out += text[i] === "\n" ? "\n" : " ";
          i++;
        }
        out += "  ";
        i++;
      } else out += c;
    }
    return out;
  }

  // The line of every value in well-formed JSON, by the API's error path: name,
  // containers[0].port, storage[1].oss.path, …
  function jsonLines(text) {
    const lines = new Map();
    let i = 0;
    let line = 1;
    const ws = () => {
      while (i < text.length && /\s/.test(text[i])) { if (text[i] === "\n") line++; i++; }
    };
    const str = () => {
      const start = ++i;
      while (i < text.length && text[i] !== '"') i += text[i] === "\\" ? 2 : 1;
      const raw = text.slice(start, i++);
      try { return JSON.parse(`"${raw}"`); } catch { return raw; }
    };
    const value = (path, at) => {
      ws();
      if (!lines.has(path)) lines.set(path, at ?? line);
      const c = text[i];
      if (c === "{" || c === "[") {
        const close = c === "{" ? "}" : "]";
        let n = 0;
        i++;
        ws();
        if (text[i] === close) { i++; return; }
        while (i < text.length) {
          ws();
          if (c === "{") {
            const keyLine = line;
            const key = str();
            ws();
            i++; // the colon
            value(path ? `${path}.${key}` : key, keyLine);
          } else {
            value(`${path}[${n++}]`);
          }
          ws();
          if (text[i++] !== ",") return;
        }
      } else if (c === '"') str();
      else while (i < text.length && !/[,\]}\s]/.test(text[i])) i++;
    };
    value("", 1);
    return lines;
  }

  function lineOf(lines, path) {
    // A missing field's error names a path with no line: its nearest parent has one.
    for (let p = path; p; p = p.replace(/(\.[^.[\]]+|\[\d+\])$/, "")) {
      if (lines.has(p)) return lines.get(p);
      if (!/(\.[^.[\]]+|\[\d+\])$/.test(p)) break;
    }
    return 1;
  }

  function parseJsonText() {
    const clean = stripComments(jsonText.value);
    try {
      return {spec: JSON.parse(clean), lines: jsonLines(clean)};
    } catch (err) {
      const at = /position (\d+)/.exec(err.message);
      const lineMatch = /line (\d+)/.exec(err.message);
      const line = lineMatch ? Number(lineMatch[1])
        : at ? clean.slice(0, Number(at[1])).split("\n").length : 1;
      return {error: {spec: [`not valid JSON: ${err.message}`]}, lines: new Map([["spec", line]])};
    }
  }

  function drawGutter(bad) {
    const count = jsonText.value.split("\n").length;
    const spans = [];
    for (let n = 1; n <= count; n++) {
      spans.push(el("span", {class: bad && bad.has(n) ? "bad" : "", title: bad && bad.get(n)}, n));
    }
    gutter.replaceChildren(...spans);
    gutter.scrollTop = jsonText.scrollTop;
  }

  function selectLine(line) {
    const starts = jsonText.value.split("\n");
    const start = starts.slice(0, line - 1).reduce((sum, l) => sum + l.length + 1, 0);
    jsonText.focus();
    jsonText.setSelectionRange(start, start + (starts[line - 1] || "").length);
    jsonText.scrollTop = Math.max(0, (line - 5) * 20);
  }

  function showJsonErrors(errors, lines) {
    const list = $("#json-errors");
    const bad = new Map();
    const items = Object.entries(errors || {}).map(([path, messages]) => {
      const line = lineOf(lines, path);
      const text = [].concat(messages).join(" ");
      bad.set(line, bad.has(line) ? `${bad.get(line)}\n${path}: ${text}` : `${path}: ${text}`);
      return el("li", {dataset: {path, line}, onclick: () => selectLine(line)},
        el("code.path", path), " ", text, el("span.line", `line ${line}`));
    });
    list.replaceChildren(...items);
    list.hidden = !items.length;
    drawGutter(bad);
  }

  // ---- field errors on the forms ----------------------------------------------------------

  function clearFieldErrors(root) {
    for (const node of root.querySelectorAll(".field-error")) node.remove();
    for (const node of root.querySelectorAll(".has-error")) node.classList.remove("has-error");
  }

  // The element whose data-path is the longest prefix of the error's path.
  function targetFor(root, path) {
    let best = null;
    let bestLength = -1;
    for (const node of root.querySelectorAll("[data-path]")) {
      for (const prefix of node.dataset.path.split(" ")) {
        const matches = path === prefix || path.startsWith(`${prefix}.`) || path.startsWith(`${prefix}[`);
        if (matches && prefix.length > bestLength) { best = node; bestLength = prefix.length; }
      }
    }
    return best;
  }

  // Fields the user has changed. The live preview marks only those, so a half-filled form
  // is not covered in errors about fields not reached yet; deploying marks every field.
  const touchedFields = new Set();
  function touch(event) {
    const field = event.target.closest("[data-path]");
    if (field) touchedFields.add(field);
  }

  // A field counts as touched when it or a section around it was (a switch opens a section).
  function wasTouched(node) {
    for (let n = node; n; n = n.parentElement && n.parentElement.closest("[data-path]")) {
      if (touchedFields.has(n)) return true;
    }
    return false;
  }

  // Shows each error at its field; returns those no field owns (listed above the form).
  function showFieldErrors(root, errors, onlyTouched) {
    clearFieldErrors(root);
    const unplaced = {};
    for (const [path, messages] of Object.entries(errors || {})) {
      const target = targetFor(root, path);
      if (!target) { unplaced[path] = messages; continue; }
      if (onlyTouched && !wasTouched(target)) continue;
      target.classList.add("has-error");
      const exact = target.dataset.path.split(" ").includes(path);
      const note = el("div.field-error", {dataset: {errorPath: path}},
        exact ? null : [el("code", path), ": "], [].concat(messages).join(" "));
      const heading = target.matches("section") ? target.querySelector(":scope > p, :scope > h2") : null;
      if (heading) heading.after(note); else target.append(note);
    }
    return unplaced;
  }

  function showGeneral(detail, errors) {
    const entries = Object.entries(errors || {});
    if (!detail && !entries.length) { generalErrors.hidden = true; return; }
    const list = el("ul", entries.map(([path, m]) =>
      el("li", el("code", path), ": ", [].concat(m).join(" "))));
    generalErrors.replaceChildren(el("strong", detail || "The spec has errors."));
    if (entries.length) generalErrors.append(list);
    generalErrors.hidden = false;
  }

  // ---- the preview -----------------------------------------------------------------------

  function currentSpec() {
    if (mode === "llm") return {spec: llmSpec()};
    if (mode === "custom") return {spec: customSpec()};
    const parsed = parseJsonText();
    return parsed.error ? {error: parsed.error, lines: parsed.lines} : parsed;
  }

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

  let previewSeq = 0;
  const refreshPreview = debounce(async () => {
    const seq = ++previewSeq;
    const current = currentSpec();
    if (current.error) {
      showPreviewErrors(current.error);
      if (mode === "json") showJsonErrors(current.error, current.lines);
      return;
    }
    // The preview needs a valid name; an unnamed form is previewed under a stand-in.
    const spec = {...current.spec, name: current.spec.name || "my-service"};
    const result = await api("POST", "/services/preview", spec);
    if (seq !== previewSeq) return; // a newer change already asked again
    const errors = result.ok ? {} : (result.data && result.data.errors) || {spec: [result.data.detail]};
    if (result.ok) showPlan(result.data.containers[0]);
    showPreviewErrors(errors);
    if (mode === "json") showJsonErrors(errors, current.lines);
    else showFieldErrors(mode === "llm" ? llmForm : customForm, errors, true);
  }, 350);

  // ---- deploying ---------------------------------------------------------------------------

  async function deploy() {
    const button = $("#deploy");
    const status = $("#deploy-status");
    const current = currentSpec();
    showGeneral();
    if (current.error) {
      showJsonErrors(current.error, current.lines);
      return;
    }
    let spec = current.spec;
    if (mode === "llm" && freeEdit.checked) spec = withEditedCommand(spec);
    button.disabled = true;
    status.textContent = editing ? "Updating…" : "Deploying…";
    const result = editing
      ? await api("PUT", `/services/${enc(editing)}`, spec)
      : await api("POST", "/services", spec);
    button.disabled = false;
    status.textContent = "";
    if (!result.ok) {
      const data = result.data || {};
      const errors = data.errors || {};
      if (mode === "json") {
        showJsonErrors(errors, current.lines);
        showGeneral(data.detail || `The API answered ${result.status}.`);
      } else {
        const unplaced = showFieldErrors(mode === "llm" ? llmForm : customForm, errors);
        showGeneral(data.detail || `The API answered ${result.status}.`, unplaced);
      }
      const first = document.querySelector(".field-error, #json-errors li");
      if (first) first.scrollIntoView({block: "center", behavior: "smooth"});
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

  // ---- wiring ------------------------------------------------------------------------------

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
    $("#custom-env").append(removable(el("div.pair",
      el("input", {name: "env-name", placeholder: "NAME"}),
      el("input", {name: "env-value", placeholder: "value"}))));
  }

  function addMount() {
    const source = el("input", {name: "mount-source", placeholder: "oss://bucket/models/qwen/"});
    const kind = el("select", {name: "mount-kind", onchange: () => {
      source.placeholder = kind.value === "memory" ? "size in GB (optional)" : `${kind.value}://bucket/path/`;
    }}, el("option", {value: "oss"}, "OSS path"), el("option", {value: "obs"}, "OBS path"),
    el("option", {value: "s3"}, "S3 path"), el("option", {value: "memory"}, "Memory (empty_dir)"));
    $("#custom-mounts").append(removable(el("div.pair", kind,
      el("input", {name: "mount-path", placeholder: "/mnt/model"}), source)));
  }

  // EAS's defaults: tensor parallelism follows the cards and shared memory is 64 GB with more
  // than one card, until the user sets either field.
  const touched = new Set();
  function applyDefaults() {
    const f = llmForm.elements;
    const engine = f.engine.value;
    const cpu = engine === "vllm-cpu";
    const cards = Number(f.cards.value) || 0;
    f.cards.closest(".field").hidden = cpu;
    $("#cards-label").textContent = engine === "vllm-ascend" ? "NPUs per instance" : "GPUs per instance";
    $("#engine-hint").textContent = ENGINE_HINTS[engine] || "";
    if (!touched.has("tensor_parallel_size")) f.tensor_parallel_size.value = cpu ? 1 : Math.max(cards, 1);
    if (!touched.has("shm_size")) f.shm_size.value = !cpu && cards > 1 ? 64 : "";
    for (const node of llmForm.querySelectorAll("[data-when]")) {
      node.hidden = !f[node.dataset.when].checked;
    }
  }

  for (const form of [llmForm, customForm]) {
    form.addEventListener("input", touch, true);
    form.addEventListener("change", touch, true);
  }
  llmForm.addEventListener("input", (event) => {
    if (["tensor_parallel_size", "shm_size"].includes(event.target.name)) touched.add(event.target.name);
    applyDefaults();
    refreshPreview();
  });
  llmForm.addEventListener("change", () => { applyDefaults(); refreshPreview(); });
  customForm.addEventListener("input", refreshPreview);
  customForm.addEventListener("change", refreshPreview);
  for (const form of [llmForm, customForm]) form.addEventListener("submit", (e) => e.preventDefault());
  jsonText.addEventListener("input", () => { drawGutter(); refreshPreview(); });
  jsonText.addEventListener("scroll", () => { gutter.scrollTop = jsonText.scrollTop; });
  jsonText.addEventListener("keydown", (event) => {
    if (event.key !== "Tab") return;
    event.preventDefault();
    jsonText.setRangeText("  ", jsonText.selectionStart, jsonText.selectionEnd, "end");
    drawGutter();
  });
  $("#add-option").addEventListener("click", () => addOption());
  $("#add-flag").addEventListener("click", () => addFlag());
  $("#add-env").addEventListener("click", addEnv);
  $("#add-mount").addEventListener("click", addMount);
  $("#deploy").addEventListener("click", deploy);

  $("#json-file").addEventListener("change", async (event) => {
    const file = event.target.files[0];
    if (!file) return;
    jsonText.value = await file.text();
    event.target.value = "";
    drawGutter();
    refreshPreview();
  });
  $("#json-format").addEventListener("click", () => {
    const parsed = parseJsonText();
    if (parsed.error) { showJsonErrors(parsed.error, parsed.lines); return; }
    jsonText.value = JSON.stringify(parsed.spec, null, 2);
    drawGutter();
    refreshPreview();
  });
  $("#json-from-form").addEventListener("click", () => {
    jsonText.value = JSON.stringify(llmSpec(), null, 2);
    drawGutter();
    refreshPreview();
  });

  freeEdit.addEventListener("change", () => {
    const on = freeEdit.checked;
    if (on) editCommand.value = previewCommand.textContent;
    editCommand.hidden = !on;
    previewCommand.hidden = on;
    $("#free-edit-note").hidden = !on;
    if (!on) refreshPreview(); // back to the command the form renders; edits are dropped
  });

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

  jsonText.value = JSON.stringify({
    name: "my-service",
    llm: {engine: "vllm-cpu", model: "tiny-llama", max_model_len: 512},
    metadata: {instance: 1, cpu: 2, memory: 8000},
  }, null, 2);
  drawGutter();
  applyDefaults();

  if (editing) {
    // Updating: the stored spec in the JSON editor; PUT keeps stored secrets sent as ******.
    $("#deploy-title").textContent = `Update ${editing}`;
    $("#deploy").textContent = "Update";
    for (const b of document.querySelectorAll("#deploy-tabs [data-tab]")) b.hidden = b.dataset.tab !== "json";
    api("GET", `/services/${enc(editing)}`).then((result) => {
      if (!result.ok) { showGeneral(result.data && result.data.detail); return; }
      jsonText.value = JSON.stringify(result.data.spec, null, 2);
      drawGutter();
      refreshPreview();
    });
  }
})();
