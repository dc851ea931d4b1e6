// The service spec's JSON Schema (GET /api/v1/schema/spec, generated from the pydantic models
// in contracts/spec.py) read for the console's forms: what the field at a path is (its kind,
// choices, default, bounds, help, whether it is required), how a form's text becomes its
// value, and whether a value fits it. Pure functions, apart from load().
"use strict";

const SpecSchema = (() => {
  let loading = null;

  // The schema, fetched once per page.
  function load() {
    loading ??= Wharf.api("GET", "/schema/spec").then((result) => {
      if (!result.ok) throw new Error((result.data && result.data.detail) || `status ${result.status}`);
      return result.data;
    });
    return loading;
  }

  // "containers[0].env[1].name" → ["containers", 0, "env", 1, "name"]
  function splitPath(path) {
    return [...path.matchAll(/([^.[\]]+)|\[(\d+)\]/g)].map(([, key, index]) =>
      (index === undefined ? key : Number(index)));
  }

  function deref(root, node) {
    let seen = 0;
    while (node && node.$ref && seen++ < 32) node = root.$defs[node.$ref.replace("#/$defs/", "")];
    return node;
  }

  // pydantic writes `X | None` as {anyOf: [X, {type: "null"}]}: that is X, nullable.
  function unwrap(root, node) {
    node = deref(root, node);
    if (node && node.anyOf) {
      const members = node.anyOf.filter((member) => member.type !== "null");
      if (members.length === 1) {
        return {node: deref(root, members[0]), nullable: members.length < node.anyOf.length};
      }
    }
    return {node: node || {}, nullable: false};
  }

  // What the schema says of the value at `path`, or null when the schema has no such field.
  function field(root, path) {
    let node = root;
    let declared = root;
    let required = true;
    for (const part of splitPath(path)) {
      const {node: parent} = unwrap(root, node);
      if (typeof part === "number") {
        if (!parent.items) return null;
        node = declared = parent.items;
        required = true;
        continue;
      }
      const property = parent.properties && parent.properties[part];
      if (!property) return null;
      required = (parent.required || []).includes(part);
      node = declared = property;
    }
    const {node: type, nullable} = unwrap(root, node);
    return {
      path,
      type: type.type,
      enum: type.enum,
      properties: type.properties,
      minimum: type.minimum,
      maximum: type.maximum,
      exclusiveMinimum: type.exclusiveMinimum,
      exclusiveMaximum: type.exclusiveMaximum,
      minLength: type.minLength,
      maxLength: type.maxLength,
      pattern: type.pattern,
      format: declared.format ?? type.format,
      default: "default" in declared ? declared.default : type.default,
      description: declared.description ?? type.description,
      title: declared.title ?? type.title,
      nullable,
      required,
    };
  }

  // The names of an object field's members whose values are objects (storage's kinds).
  function objectMembers(root, path) {
    const found = field(root, path);
    return Object.keys((found && found.properties) || {}).filter((name) =>
      unwrap(root, found.properties[name]).node.type === "object");
  }

  // How a form shows the field: a choice, an on/off switch, a number, a line or a long text.
  function kind(f) {
    if (f.enum) return "choice";
    if (f.type === "boolean") return f.nullable ? "choice" : "switch";
    if (f.type === "integer" || f.type === "number") return "number";
    if (f.type === "string" && f.maxLength > 1024) return "long-text";
    return "text";
  }

  // [value, label] pairs of a choice, with a first "" (left out) labelled `blank` when
  // leaving the field out is what its default means.
  function choices(f, exclude, blank) {
    const values = f.enum || [true, false];
    const list = values.filter((v) => !(exclude || []).includes(String(v)))
      .map((v) => [String(v), v === "" ? "(default)" : String(v)]);
    if (f.default === null || (f.default === undefined && !f.required)) list.unshift(["", blank || ""]);
    return list;
  }

  // The form's text for a value; the field's default when there is none.
  function text(f, value) {
    const shown = value === undefined ? f.default : value;
    return shown === null || shown === undefined ? "" : String(shown);
  }

  // A form's text as the value sent: nothing for an empty field; a number for a number's
  // text, else the text itself, so that check() names what is wrong with it.
  function parse(f, raw, keepSpaces) {
    if (typeof raw === "boolean") return raw;
    const value = keepSpaces ? String(raw ?? "") : String(raw ?? "").trim();
    if (value === "") return undefined;
    if (f.enum) return f.enum.find((choice) => String(choice) === value) ?? value;
    if (f.type === "boolean") return value === "true" ? true : value === "false" ? false : value;
    if (f.type === "integer") return /^[+-]?\d+$/.test(value) ? Number(value) : value;
    if (f.type === "number") return Number.isFinite(Number(value)) ? Number(value) : value;
    return value;
  }

  function quoted(values) {
    const words = values.map((v) => `'${v}'`);
    return words.length > 1 ? `${words.slice(0, -1).join(", ")} or ${words.at(-1)}` : words[0];
  }

  // Why `value` does not fit the field, in the API's (pydantic's) words; null when it does.
  function check(f, value) {
    if (value === undefined) return f.required && f.default === undefined ? "Field required" : null;
    if (f.enum && !f.enum.includes(value)) return `Input should be ${quoted(f.enum)}`;
    const types = {
      integer: [Number.isInteger(value), "Input should be a valid integer"],
      number: [typeof value === "number" && Number.isFinite(value), "Input should be a valid number"],
      string: [typeof value === "string", "Input should be a valid string"],
      boolean: [typeof value === "boolean", "Input should be a valid boolean"],
    };
    const [fits, message] = types[f.type] || [true, null];
    if (!fits) return message;
    return typeof value === "number" ? checkNumber(f, value) : typeof value === "string" ? checkText(f, value) : null;
  }

  function checkNumber(f, value) {
    if (f.minimum !== undefined && value < f.minimum) return `Input should be greater than or equal to ${f.minimum}`;
    if (f.exclusiveMinimum !== undefined && value <= f.exclusiveMinimum) return `Input should be greater than ${f.exclusiveMinimum}`;
    if (f.maximum !== undefined && value > f.maximum) return `Input should be less than or equal to ${f.maximum}`;
    if (f.exclusiveMaximum !== undefined && value >= f.exclusiveMaximum) return `Input should be less than ${f.exclusiveMaximum}`;
    return null;
  }

  function checkText(f, value) {
    const plural = (n) => `${n} character${n === 1 ? "" : "s"}`;
    if (f.minLength !== undefined && value.length < f.minLength) return `String should have at least ${plural(f.minLength)}`;
    if (f.maxLength !== undefined && value.length > f.maxLength) return `String should have at most ${plural(f.maxLength)}`;
    if (f.pattern && !new RegExp(f.pattern, "u").test(value)) return `String should match pattern '${f.pattern}'`;
    return null;
  }

  // Puts `value` at `path` in `object`, making the objects and lists on the way.
  function put(object, path, value) {
    const parts = splitPath(path);
    let node = object;
    parts.slice(0, -1).forEach((part, i) => {
      node[part] ??= typeof parts[i + 1] === "number" ? [] : {};
      node = node[part];
    });
    node[parts.at(-1)] = value;
    return object;
  }

  return {load, splitPath, field, objectMembers, kind, choices, text, parse, check, put};
})();
