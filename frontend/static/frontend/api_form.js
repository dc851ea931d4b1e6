// Forms generated from the REST API's own OpenAPI schema (/api/schema/, drf-spectacular): an
// operation's request body (by operationId) gives the fields, their kinds, choices, bounds,
// help and required-ness, so a page never restates them. Reading a form gives the body it
// shows; the API's errors ({"errors": {"services[0]": [...]}}) show at the field they name.
"use strict";

const ApiForm = (() => {
  const {el} = Wharf;
  let loading = null;

  // The OpenAPI document, fetched once per page.
  function load() {
    loading ??= Wharf.request("GET", "/api/schema/?format=json").then((result) => {
      if (!result.ok) throw new Error((result.data && result.data.detail) || `status ${result.status}`);
      return result.data;
    });
    return loading;
  }

  // The JSON body schema of the operation `operationId`.
  async function body(operationId) {
    const openapi = await load();
    for (const methods of Object.values(openapi.paths)) {
      for (const op of Object.values(methods)) {
        if (op && op.operationId === operationId) return op.requestBody.content["application/json"].schema;
      }
    }
    throw new Error(`the API schema has no operation ${operationId}`);
  }

  // OpenAPI 3.1 writes "X or null" as {type: ["X", "null"]}.
  function typeOf(prop) {
    const types = [].concat(prop.type || "string");
    return {type: types.find((t) => t !== "null") || "string", nullable: types.includes("null")};
  }

  // A property's name as a label: "max_concurrency" → "Max concurrency", "rpm" → "RPM".
  const words = (name) => (name.length <= 3 ? name.toUpperCase()
    : name.replace(/_/g, " ").replace(/^./, (c) => c.toUpperCase()));

  function widget(path, prop, value) {
    const {type} = typeOf(prop);
    const shown = value === null || value === undefined ? "" : value;
    if (prop.enum) {
      return el("select", {name: path}, prop.enum.map((v) =>
        el("option", {value: v, selected: v === shown}, v)));
    }
    if (type === "integer" || type === "number") {
      return el("input", {type: "number", name: path, value: String(shown), step: type === "integer" ? "1" : "any",
        min: prop.minimum ?? prop.exclusiveMinimum, max: prop.maximum ?? prop.exclusiveMaximum});
    }
    if (prop.format === "date-time") return el("input", {type: "datetime-local", name: path});
    if (type === "array") {
      return el("input", {name: path, value: [].concat(shown || []).join(", "), spellcheck: false,
        placeholder: "comma-separated", autocomplete: "off"});
    }
    return el("input", {name: path, value: String(shown), maxlength: prop.maxLength, spellcheck: false,
      autocomplete: "off"});
  }

  // Fields for each property of `schema` under `prefix` (nested objects as fieldsets), with
  // `values` (an object shaped like the body) filled in.
  function fields(schema, values, prefix, required) {
    return Object.entries(schema.properties || {}).map(([name, prop]) => {
      const path = prefix ? `${prefix}.${name}` : name;
      const value = values ? values[name] : undefined;
      if (typeOf(prop).type === "object" && prop.properties) {
        return el("fieldset.api-group", {dataset: {path}}, el("legend", prop.title || words(name)),
          el("div.row", fields(prop, value, path, prop.required || [])));
      }
      const input = widget(path, prop, value);
      const node = el("label.field.small", {dataset: {path, field: path}},
        el("span", prop.title || words(name), (required || []).includes(name) ? " *" : ""),
        input, prop.description ? el("small", prop.description) : null);
      node.apiProp = prop;
      return node;
    });
  }

  // Fills `root` with the fields of `schema`; `only` limits them to those top-level names.
  function render(root, schema, {values, only} = {}) {
    const shown = only ? {...schema, properties: Object.fromEntries(
      Object.entries(schema.properties).filter(([name]) => only.includes(name)))} : schema;
    root.replaceChildren(...fields(shown, values, "", schema.required));
  }

  function put(object, path, value) {
    const parts = path.split(".");
    let node = object;
    for (const part of parts.slice(0, -1)) node = node[part] ??= {};
    node[parts.at(-1)] = value;
  }

  // The value a field's text stands for; undefined: left out. `blank` is what an empty field
  // of a nullable property sends ("omit" or null).
  function valueOf(prop, raw, blank) {
    const text = raw.trim();
    const {type, nullable} = typeOf(prop);
    if (text === "") return nullable && blank === null ? null : undefined;
    if (type === "integer") return /^[+-]?\d+$/.test(text) ? Number(text) : text;
    if (type === "number") return Number.isFinite(Number(text)) ? Number(text) : text;
    if (type === "array") return text.split(",").map((s) => s.trim()).filter(Boolean);
    if (prop.format === "date-time") return new Date(text).toISOString(); // local time → UTC
    return text;
  }

  // The body the form shows. {blank: null} sends null for an empty nullable field (a quota
  // cleared is "none"); by default an empty field is left out (the API's default).
  function read(root, {blank} = {blank: "omit"}) {
    const result = {};
    for (const node of root.querySelectorAll("[data-field]")) {
      const value = valueOf(node.apiProp, node.querySelector("input, select").value, blank);
      if (value !== undefined) put(result, node.dataset.path, value);
    }
    return result;
  }

  // Each error at the field whose path is the longest prefix of it; the rest are returned.
  function showErrors(root, errors) {
    for (const node of root.querySelectorAll(".field-error")) node.remove();
    const unplaced = {};
    for (const [path, messages] of Object.entries(errors || {})) {
      const target = [...root.querySelectorAll("[data-path]")]
        .filter((n) => path === n.dataset.path || path.startsWith(`${n.dataset.path}.`)
          || path.startsWith(`${n.dataset.path}[`))
        .sort((a, b) => b.dataset.path.length - a.dataset.path.length)[0];
      if (!target) { unplaced[path] = messages; continue; }
      target.append(el("div.field-error", {dataset: {errorPath: path}}, [].concat(messages).join(" ")));
    }
    return unplaced;
  }

  return {load, body, render, read, showErrors, typeOf};
})();
