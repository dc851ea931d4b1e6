// API keys: the workspace's keys (polled every 5 s); those with the `keys` right make one
// (the form is generated from the API schema's keys_create body, api_form.js), see it once,
// and revoke keys. Errors show at the field the API names.
"use strict";

(() => {
  const {api, el, badge, timeCell, when, enc, toast, confirm, copy, config} = Wharf;
  const body = document.querySelector("#keys tbody");
  const maker = config.rights.includes("keys");

  const why = (result) => (result.data && result.data.detail) || `The API answered ${result.status}.`;

  async function load() {
    const result = await api("GET", "/keys");
    if (!result.ok) {
      body.replaceChildren(el("tr", el("td.field-error", {colspan: 8}, why(result))));
      return;
    }
    body.replaceChildren(...(result.data.length ? result.data.map(row)
      : [el("tr", el("td.muted", {colspan: 8}, "No API keys in this workspace yet."))]));
  }

  function limits(key) {
    const parts = [["rpm", "req/min"], ["tpm", "tokens/min"], ["max_concurrency", "at once"]]
      .filter(([name]) => key[name] !== null).map(([name, unit]) => `${key[name]} ${unit}`);
    return parts.length ? parts.join(" · ") : el("span.muted", "none");
  }

  function row(key) {
    const revoke = maker && key.state === "active"
      ? el("button.btn.small.danger", {dataset: {action: "revoke"}, onclick: () => revokeKey(key)}, "Revoke")
      : null;
    return el("tr", {dataset: {key: key.id}},
      el("td", el("span.name", key.name), el("span.sub", `${key.id} · ${key.hint}…`)),
      el("td", key.owner),
      el("td", key.services ? key.services.join(", ") : el("span.muted", "every service")),
      el("td.nowrap", limits(key)),
      el("td.nowrap", key.expires_at ? when(key.expires_at) : el("span.muted", "never")),
      el("td.state", badge(key.state)),
      el("td", timeCell(key.created_at)),
      el("td.right", revoke));
  }

  async function revokeKey(key) {
    const sure = await confirm({title: `Revoke ${key.name}?`, action: "Revoke", danger: true,
      message: "Calls with this key are refused from now on. This cannot be undone."});
    if (!sure) return;
    const result = await api("DELETE", `/keys/${enc(key.id)}`);
    toast(result.ok ? `${key.name} revoked` : why(result), result.ok ? "" : "error");
    refresher.now();
  }

  async function setUpForm() {
    const form = document.getElementById("key-form");
    const fields = document.getElementById("key-fields");
    const failure = document.getElementById("key-error");
    try {
      ApiForm.render(fields, await ApiForm.body("keys_create"));
    } catch (err) {
      fields.replaceChildren(el("p.field-error", `The API's schema could not be read: ${err.message}`));
      return;
    }
    offerNames(fields.querySelector("[data-field=services]"));
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const result = await api("POST", "/keys", ApiForm.read(fields));
      failure.hidden = true;
      if (!result.ok) {
        const unplaced = ApiForm.showErrors(fields, (result.data && result.data.errors) || {});
        const rest = Object.entries(unplaced).map(([k, v]) => `${k}: ${[].concat(v).join(" ")}`);
        failure.textContent = [why(result), ...rest].join(" ");
        failure.hidden = false;
        return;
      }
      ApiForm.showErrors(fields, {});
      form.reset();
      document.getElementById("new-key-value").textContent = result.data.key;
      document.getElementById("new-key").hidden = false;
      refresher.now();
    });
    document.getElementById("new-key-copy").addEventListener("click",
      () => copy(document.getElementById("new-key-value").textContent));
  }

  // The names a key may be scoped to here, under the services field: services and groups.
  async function offerNames(field) {
    const [services, groups] = await Promise.all([api("GET", "/services"), api("GET", "/groups")]);
    const names = [...(services.ok ? services.data : []), ...(groups.ok ? groups.data : [])]
      .map((found) => found.name);
    if (field && names.length) field.append(el("small.scope-names", `In this workspace: ${names.join(", ")}`));
  }

  if (maker) setUpForm();
  const refresher = Wharf.poll(load, 5000);
})();
