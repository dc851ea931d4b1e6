// Shared helpers of the console pages: the REST API with the session cookie + CSRF token,
// DOM building, dialogs, formatting. Plain browser JS; no build step, no dependencies.
"use strict";

const Wharf = (() => {
  const config = JSON.parse(document.getElementById("console-config").textContent);

  function csrfToken() {
    // Django may rotate the token (e.g. at sign-in); the cookie is always the current one.
    const match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    return match ? decodeURIComponent(match[1]) : config.csrfToken;
  }

  // fetch() with the session cookie; writes carry X-CSRFToken, which DRF's
  // SessionAuthentication requires for unsafe methods.
  async function request(method, url, body, pages) {
    const init = {method, credentials: "same-origin", headers: {Accept: "application/json"}};
    if (method !== "GET" && method !== "HEAD") init.headers["X-CSRFToken"] = csrfToken();
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = typeof body === "string" ? body : JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(url, init);
    } catch (err) {
      return {ok: false, status: 0, data: {detail: `The console cannot reach the server (${err.message}).`}};
    }
    if (response.status === 401 || response.status === 403) {
      const data = await response.json().catch(() => ({}));
      if (/credentials|authenticat/i.test(data.detail || "")) {
        location.href = `/login/?next=${encodeURIComponent(location.pathname + location.search)}`;
      }
      return {ok: false, status: response.status, data};
    }
    const text = await response.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch { data = {detail: text.slice(0, 300)}; }
    // A long list comes in pages (Link: <…>; rel="next", controlplane/paging.py): read them all.
    const next = nextPage(response.headers.get("Link"));
    if (method === "GET" && response.ok && Array.isArray(data) && next && (pages || 0) < MAX_PAGES) {
      const rest = await request("GET", next, undefined, (pages || 0) + 1);
      return rest.ok ? {ok: true, status: response.status, data: data.concat(rest.data)} : rest;
    }
    return {ok: response.ok, status: response.status, data};
  }

  const MAX_PAGES = 100;
  function nextPage(link) {
    const match = (link || "").match(/<([^>]+)>;\s*rel="next"/);
    return match ? match[1] : null;
  }

  const api = (method, path, body) => request(method, config.api + path, body);

  // el("div.card", {onclick}, child, "text", ...): a small DOM builder that never parses HTML,
  // so service names, logs and model output are always shown as text.
  function el(tag, attrs, ...children) {
    const [name, ...classes] = tag.split(".");
    const node = document.createElement(name);
    if (classes.length) node.className = classes.join(" ");
    if (attrs && (typeof attrs !== "object" || attrs instanceof Node || Array.isArray(attrs))) {
      children.unshift(attrs);
      attrs = null;
    }
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else if (key === "class") node.className += (node.className ? " " : "") + value;
      else if (key === "dataset") Object.assign(node.dataset, value);
      else if (key in node && typeof value !== "string") node[key] = value;
      else node.setAttribute(key, value === true ? "" : value);
    }
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }

  function badge(state) {
    return el("span.badge", {class: state || ""}, state || "unknown");
  }

  function when(value) {
    if (!value) return "";
    const date = new Date(value);
    const pad = (n) => String(n).padStart(2, "0");
    return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())} ` +
      `${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}`;
  }

  function ago(value) {
    if (!value) return "";
    const seconds = Math.max(0, (Date.now() - new Date(value).getTime()) / 1000);
    if (seconds < 60) return `${Math.floor(seconds)} s ago`;
    if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
    if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ago`;
    return `${Math.floor(seconds / 86400)} d ago`;
  }

  function timeCell(value) {
    return el("span.nowrap", {title: when(value)}, ago(value));
  }

  // What a service runs: its engine, or "custom" for an image and command of the user's.
  function engineOf(spec) {
    const llm = (spec && spec.llm) || {};
    const container = ((spec && spec.containers) || [])[0] || {};
    if (!llm.engine) return "custom";
    return container.command || container.script ? `${llm.engine} (own command)` : llm.engine;
  }

  // Instances grouped by their `role` (prefill/decode with llm.pd); one group without roles.
  function byRole(instances) {
    const groups = new Map();
    for (const instance of instances) {
      const role = instance.role || "";
      if (!groups.has(role)) groups.set(role, []);
      groups.get(role).push(instance);
    }
    return groups;
  }

  // "ready/total", or "prefill 1/1 · decode 0/1" when the service has roles.
  function instanceSummary(service, instances) {
    const wanted = service.replicas || {};
    if ("prefill" in wanted && instances) {
      const groups = byRole(instances);
      return ["prefill", "decode"].map((role) => {
        const list = groups.get(role) || [];
        const want = wanted[role];
        return `${role} ${list.filter((i) => i.state === "ready").length}/${want}`;
      }).join(" · ");
    }
    return `${service.ready_instances}/${service.instances}`;
  }

  function progressText(service) {
    if (service.phase === "failed" && service.last_error) return service.last_error;
    return service.progress || "";
  }

  const busy = new Set(["pending", "deploying", "updating", "stopping", "deleting"]);

  // For the list: a settled service's progress ("1/1 instances ready", "stopped") only
  // repeats its phase and instance columns, so only work under way or trouble is shown.
  function progressNode(service) {
    const text = progressText(service);
    if (!text || ["running", "stopped", "completed"].includes(service.phase)) return null;
    return el("span.sub", busy.has(service.phase) ? el("span.spinner") : null, text);
  }

  // Repeats `fn` every `ms` while the page is visible; a slow answer never overlaps the next.
  function poll(fn, ms) {
    let timer = null;
    let stopped = false;
    const tick = async () => {
      if (stopped) return;
      if (!document.hidden) {
        try { await fn(); } catch (err) { console.error(err); }
      }
      if (!stopped) timer = setTimeout(tick, ms);
    };
    tick();
    return {stop() { stopped = true; clearTimeout(timer); }, now() { clearTimeout(timer); tick(); }};
  }

  function debounce(fn, ms) {
    let timer = null;
    return (...args) => { clearTimeout(timer); timer = setTimeout(() => fn(...args), ms); };
  }

  function toast(message, kind) {
    const node = document.getElementById("toast");
    node.textContent = message;
    node.className = `toast ${kind || ""}`;
    node.hidden = false;
    clearTimeout(toast.timer);
    toast.timer = setTimeout(() => { node.hidden = true; }, 3500);
  }

  async function copy(text) {
    try {
      await navigator.clipboard.writeText(text);
    } catch {
      // Clipboard API needs a secure context; plain http on a LAN address falls back here.
      const area = el("textarea", {style: "position:fixed;opacity:0"}, text);
      document.body.append(area);
      area.select();
      document.execCommand("copy");
      area.remove();
    }
    toast("Copied to the clipboard");
  }

  // A modal built from `body` nodes; resolves with the button value ("" when dismissed).
  function dialog({title, body, buttons, onOpen}) {
    const node = document.getElementById("dialog");
    node.replaceChildren(el("form", {method: "dialog"},
      el("h2", title),
      body,
      el("div.buttons", buttons.map((b) =>
        el("button.btn", {value: b.value, class: b.class || "", type: "submit",
          dataset: {role: b.value}}, b.label)))));
    return new Promise((resolve) => {
      node.addEventListener("close", () => resolve(node.returnValue), {once: true});
      node.returnValue = "";
      node.showModal();
      if (onOpen) onOpen(node);
    });
  }

  async function confirm({title, message, action, danger}) {
    const answer = await dialog({
      title,
      body: (Array.isArray(message) ? message : [message]).map((m) => el("p", m)),
      buttons: [
        {value: "cancel", label: "Cancel"},
        {value: "ok", label: action, class: danger ? "danger solid" : "primary"},
      ],
    });
    return answer === "ok";
  }

  async function askNumber({title, message, label, value, min}) {
    let input;
    const answer = await dialog({
      title,
      body: [el("p", message), el("label.field", el("span", label),
        input = el("input", {type: "number", min: String(min), value: String(value), name: "value"}))],
      buttons: [{value: "cancel", label: "Cancel"}, {value: "ok", label: "Apply", class: "primary"}],
      onOpen: () => input.select(),
    });
    return answer === "ok" ? Number(input.value) : null;
  }

  // Start, stop, scale, delete: the same calls from the list and the service page.
  const actions = {
    async start(name) { return report(await api("POST", `/services/${enc(name)}/start`), "Starting"); },
    async stop(name) { return report(await api("POST", `/services/${enc(name)}/stop`), "Stopping"); },
    async scale(name) {
      const current = await api("GET", `/services/${enc(name)}`);
      if (!current.ok) return report(current);
      const spec = current.data.spec;
      const count = await askNumber({
        title: `Scale ${name}`, label: "Instances", min: 0,
        value: (spec.metadata && spec.metadata.instance) ?? 1,
        message: "The spec is saved with the new instance count; the worker adds or removes instances.",
      });
      if (count === null || Number.isNaN(count)) return false;
      // Secrets come back as ******; the API keeps the stored ones when they are sent back.
      spec.metadata = {...(spec.metadata || {}), instance: count};
      return report(await api("PUT", `/services/${enc(name)}`, spec), `Scaling to ${count}`);
    },
    async delete(name) {
      const sure = await confirm({
        title: `Delete ${name}?`,
        message: ["Every instance is removed and the service's token stops working.",
          "This cannot be undone."],
        action: "Delete", danger: true,
      });
      if (!sure) return false;
      return report(await api("DELETE", `/services/${enc(name)}`), "Deleting");
    },
  };

  function report(result, success) {
    if (result.ok) {
      if (success) toast(`${success}…`);
      return true;
    }
    const data = result.data || {};
    const details = Object.entries(data.errors || {}).map(([k, v]) => `${k}: ${[].concat(v).join(" ")}`);
    toast([data.detail || `Failed (${result.status})`, ...details].join(" "), "error");
    return false;
  }

  const enc = encodeURIComponent;

  // Shell words joined back into a line a person can read and a shell parses the same way.
  function shellQuote(word) {
    if (word === "") return "''";
    return /^[A-Za-z0-9_./:=,@%+-]+$/.test(word) ? word : `'${word.replace(/'/g, "'\\''")}'`;
  }

  function tabs(container, onChange) {
    const buttons = [...container.querySelectorAll("[data-tab]")];
    const select = (name) => {
      for (const b of buttons) b.classList.toggle("active", b.dataset.tab === name);
      for (const p of document.querySelectorAll("[data-panel]")) p.hidden = p.dataset.panel !== name;
      if (onChange) onChange(name);
    };
    for (const b of buttons) b.addEventListener("click", () => {
      history.replaceState(null, "", `#${b.dataset.tab}`);
      select(b.dataset.tab);
    });
    const initial = location.hash.slice(1);
    select(buttons.some((b) => b.dataset.tab === initial) ? initial : buttons[0].dataset.tab);
    return select;
  }

  return {config, api, request, el, badge, when, ago, timeCell, engineOf, byRole,
    instanceSummary, progressNode, progressText, poll, debounce, toast, copy, dialog, confirm,
    actions, report, enc, shellQuote, tabs, csrfToken};
})();
