// Forms built from the spec's schema (SpecSchema). A template lists which schema paths a form
// shows (`data-field="llm.max_model_len"`, with the words a person reads: data-label,
// data-placeholder); the widget's kind, choices, default, bounds, help and required-ness come
// from the schema. Lists (`data-list="containers[0].env"`) hold rows of such fields.
// Reading a form gives the spec it shows and the schema's objections, by path.
"use strict";

const SpecForm = (() => {
  const {el} = Wharf;

  // A one-word description is a unit ("MB", "GB", "ms"): shown after the label, not as help.
  const isUnit = (text) => Boolean(text) && !/\s/.test(text);

  function widget(f, hints) {
    const name = f.path;
    const placeholder = hints.placeholder || undefined;
    const value = SpecSchema.text(f);
    switch (SpecSchema.kind(f)) {
      case "choice": {
        const exclude = hints.exclude ? hints.exclude.split(" ") : [];
        const options = SpecSchema.choices(f, exclude, placeholder);
        const chosen = options.some(([v]) => v === value) ? value : options[0][0];
        return el("select", {name}, options.map(([v, label]) =>
          el("option", {value: v, selected: v === chosen}, label)));
      }
      case "switch":
        return el("input", {type: "checkbox", name, checked: f.default === true});
      case "number":
        return el("input", {type: "number", name, value, placeholder, required: f.required,
          min: f.minimum ?? f.exclusiveMinimum, max: f.maximum ?? f.exclusiveMaximum,
          step: f.type === "integer" ? "1" : "any"});
      case "long-text": // a line in a list's row (an environment variable's value)
        if (hints.compact === undefined) {
          return el("textarea.mono", {name, rows: 3, placeholder, required: f.required}, value);
        }
        return el("input", {name, value, placeholder, required: f.required, spellcheck: false});
      default: {
        const secret = f.format === "password"; // never shown again: typed, not echoed
        return el("input", {name, value, placeholder, required: f.required, spellcheck: false,
          type: secret ? "password" : "text", autocomplete: secret ? "new-password" : "off"});
      }
    }
  }

  // Fills a `data-field` element with its label, widget and help, from the schema.
  function renderField(node, schema) {
    const f = SpecSchema.field(schema, node.dataset.field);
    if (!f) throw new Error(`the spec schema has no field ${node.dataset.field}`);
    node.specField = f;
    node.dataset.path = [f.path, ...(node.dataset.alsoPath || "").split(" ")].join(" ").trim();
    node.classList.toggle("required", f.required && f.default === undefined);
    const label = node.dataset.label || f.title || f.path;
    const unit = isUnit(f.description) ? ` (${f.description})` : "";
    const input = widget(f, node.dataset);
    if (node.dataset.compact !== undefined) {
      input.setAttribute("aria-label", label + unit);
      if (!input.placeholder && input.tagName !== "SELECT") input.placeholder = label + unit;
      node.replaceChildren(input);
      return;
    }
    const help = !isUnit(f.description) && f.description ? el("small", f.description) : null;
    node.replaceChildren(...[el("span", {title: label + unit}, label, unit), input, help].filter(Boolean));
  }

  function render(root, schema) {
    for (const node of root.querySelectorAll("[data-field]")) renderField(node, schema);
  }

  // Shown: neither it nor a part around it (up to the form) is hidden.
  function shown(node, root) {
    for (let n = node; n && n !== root; n = n.parentElement) if (n.hidden) return false;
    return true;
  }

  function inputOf(node) {
    return node.querySelector("input, select, textarea");
  }

  function valueOf(node) {
    const input = inputOf(node);
    const raw = input.type === "checkbox" ? input.checked : input.value;
    return SpecSchema.parse(node.specField, raw, node.dataset.keepSpaces !== undefined);
  }

  // A row's fields get the row's place in its list: storage[1].oss.path.
  function number(row, path) {
    for (const node of row.querySelectorAll("[data-item]")) {
      const full = `${path}.${node.dataset.item}`;
      node.dataset.path = full;
      inputOf(node).name = full;
    }
  }

  // {spec, errors}: the spec the form shows, and what the schema says is wrong in it.
  function read(root) {
    const spec = {};
    const errors = {};
    const take = (node) => {
      const value = valueOf(node);
      const problem = SpecSchema.check(node.specField, value);
      if (problem) errors[node.dataset.path.split(" ")[0]] = [problem];
      if (value !== undefined) SpecSchema.put(spec, node.dataset.path.split(" ")[0], value);
    };
    for (const node of root.querySelectorAll("[data-field]:not([data-item])")) {
      if (shown(node, root)) take(node);
    }
    for (const list of root.querySelectorAll("[data-list]")) {
      if (!shown(list, root)) continue;
      let n = 0;
      for (const row of list.querySelectorAll(":scope > .pair")) {
        const fields = [...row.querySelectorAll("[data-item]")].filter((f) => shown(f, row));
        if (fields.every((node) => valueOf(node) === undefined)) continue; // a blank row
        const path = `${list.dataset.list}[${n++}]`;
        number(row, path);
        SpecSchema.put(spec, path, {});
        for (const object of (row.dataset.objects || "").split(" ").filter(Boolean)) {
          SpecSchema.put(spec, `${path}.${object}`, {});
        }
        fields.forEach(take);
      }
    }
    return {spec, errors};
  }

  // A row of `list`: one compact field per item path ("name", "empty_dir.size_limit").
  function row(list, schema, items, extra) {
    const node = el("div.pair", extra || null);
    for (const item of items) {
      const field = el("label.field.compact", {dataset: {field: `${list.dataset.list}[0].${item}`,
        item, compact: "", ...(list.dataset.keepSpaces === item ? {keepSpaces: ""} : {})}});
      renderField(field, schema);
      node.append(field);
    }
    return node;
  }

  // ---- errors at the fields -----------------------------------------------------------------

  function clearErrors(root) {
    for (const node of root.querySelectorAll(".field-error")) node.remove();
    for (const node of root.querySelectorAll(".has-error")) node.classList.remove("has-error");
  }

  // The shown element whose data-path is the longest prefix of the error's path.
  function targetFor(root, path) {
    let best = null;
    let bestLength = -1;
    for (const node of root.querySelectorAll("[data-path]")) {
      if (!shown(node, root)) continue;
      for (const prefix of node.dataset.path.split(" ")) {
        const matches = path === prefix || path.startsWith(`${prefix}.`) || path.startsWith(`${prefix}[`);
        if (matches && prefix.length > bestLength) { best = node; bestLength = prefix.length; }
      }
    }
    return best;
  }

  // Fields the user has changed. The live preview marks only those, so a half-filled form is
  // not covered in errors about fields not reached yet; deploying marks every field.
  const touched = new WeakSet();
  function track(form) {
    const touch = (event) => {
      const field = event.target.closest("[data-path]");
      if (field) touched.add(field);
    };
    form.addEventListener("input", touch, true);
    form.addEventListener("change", touch, true);
  }

  // A field counts as touched when it or a section around it was (a switch opens a section).
  function wasTouched(node) {
    for (let n = node; n; n = n.parentElement && n.parentElement.closest("[data-path]")) {
      if (touched.has(n)) return true;
    }
    return false;
  }

  // Shows each error at its field; returns those no field owns (listed above the form).
  function showErrors(root, errors, onlyTouched) {
    clearErrors(root);
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

  return {render, renderField, read, row, track, showErrors, clearErrors, shown};
})();
