// The acting workspace: its quotas beside what is used of them, and its members. Those with
// the `manage` right set quotas and add, change and remove members below owner (owners also
// owners); staff also set ceilings. Both forms are generated from the API schema's bodies
// (workspaces_quotas, members_add) by api_form.js.
"use strict";

(() => {
  const {api, el, enc, toast, confirm, timeCell, config} = Wharf;
  const manager = config.rights.includes("manage");
  const owner = config.rights.includes("own");
  const base = `/workspaces/${enc(config.workspace)}`;
  const why = (result) => (result.data && result.data.detail) || `The API answered ${result.status}.`;

  function fail(box, fields, result) {
    const unplaced = ApiForm.showErrors(fields, (result.data && result.data.errors) || {});
    box.textContent = [why(result), ...Object.entries(unplaced)
      .map(([k, v]) => `${k}: ${[].concat(v).join(" ")}`)].join(" ");
    box.hidden = false;
  }

  // ---- quotas ------------------------------------------------------------------------------

  const figure = (v) => (v === null || v === undefined ? el("span.muted", "none") : String(v));

  function quotaRows(ws) {
    const kinds = [...new Set([...Object.keys(ws.limits.cards), ...Object.keys(ws.used.cards),
      ...Object.keys(ws.quotas.cards), ...Object.keys(ws.ceilings.cards)])].sort();
    const rows = [["services", (q) => q.services], ["instances", (q) => q.instances],
      ...kinds.map((k) => [`${k.toUpperCase()} cards`, (q) => q.cards[k]]),
      ["queued items", (q) => q.queued_items]];
    return rows.map(([label, pick]) => {
      const used = pick(ws.used) ?? 0;
      const limit = pick(ws.limits);
      const full = limit !== null && limit !== undefined && used >= limit;
      return el("tr", {dataset: {resource: label}},
        el("td", label), el("td", {class: full ? "field-error" : ""}, String(used)),
        el("td", figure(pick(ws.quotas))), el("td", figure(pick(ws.ceilings))),
        el("td", figure(limit)));
    });
  }

  let quotaForm = null;
  async function loadQuotas() {
    const result = await api("GET", base);
    const body = document.querySelector("#quotas tbody");
    if (!result.ok) {
      body.replaceChildren(el("tr", el("td.field-error", {colspan: 5}, why(result))));
      return;
    }
    body.replaceChildren(...quotaRows(result.data));
    if (manager && !quotaForm) {
      quotaForm = document.getElementById("quota-fields");
      ApiForm.render(quotaForm, await ApiForm.body("workspaces_quotas"),
        {values: result.data, only: config.staff ? ["quotas", "ceilings"] : ["quotas"]});
    }
  }

  async function saveQuotas(event) {
    event.preventDefault();
    const box = document.getElementById("quota-error");
    box.hidden = true;
    const result = await api("PATCH", base, ApiForm.read(quotaForm, {blank: null}));
    if (!result.ok) return fail(box, quotaForm, result);
    ApiForm.showErrors(quotaForm, {});
    toast("Quotas saved");
    loadQuotas();
  }

  // ---- members -----------------------------------------------------------------------------

  let roles = [];
  // Owners are made and unmade by owners only (controlplane.workspaces.roles.may_assign).
  const mayChange = (role) => manager && (owner || role !== "owner");
  const offered = () => roles.filter((role) => owner || role !== "owner");

  function memberRow(member) {
    const changeable = mayChange(member.role) && roles.length;
    const role = changeable
      ? el("select", {name: "role", onchange: (e) => setRole(member, e.target.value)},
          offered().map((r) => el("option", {value: r, selected: r === member.role}, r)))
      : el("span.badge", member.role);
    return el("tr", {dataset: {member: member.user}},
      el("td.name", member.user), el("td", role), el("td", timeCell(member.since)),
      el("td.right", changeable ? el("button.btn.small.danger", {dataset: {action: "remove"},
        onclick: () => remove(member)}, "Remove") : null));
  }

  async function loadMembers() {
    const result = await api("GET", `${base}/members`);
    const body = document.querySelector("#members tbody");
    if (!result.ok) {
      body.replaceChildren(el("tr", el("td.field-error", {colspan: 4}, why(result))));
      return;
    }
    body.replaceChildren(...result.data.map(memberRow));
  }

  async function setRole(member, role) {
    const result = await api("PATCH", `${base}/members/${enc(member.user)}`, {role});
    toast(result.ok ? `${member.user} is now ${role}` : why(result), result.ok ? "" : "error");
    loadMembers();
  }

  async function remove(member) {
    const sure = await confirm({title: `Remove ${member.user}?`, action: "Remove", danger: true,
      message: `${member.user} loses access to workspace ${config.workspace}, and their API tokens for it stop working.`});
    if (!sure) return;
    const result = await api("DELETE", `${base}/members/${enc(member.user)}`);
    toast(result.ok ? `${member.user} removed` : why(result), result.ok ? "" : "error");
    loadMembers();
  }

  async function setUpMemberForm() {
    const fields = document.getElementById("member-fields");
    const schema = await ApiForm.body("members_add");
    roles = schema.properties.role.enum;
    ApiForm.render(fields, schema, {values: {role: "developer"}});
    if (!owner) fields.querySelector("select[name=role] option[value=owner]")?.remove();
    document.getElementById("member-form").addEventListener("submit", async (event) => {
      event.preventDefault();
      const box = document.getElementById("member-error");
      box.hidden = true;
      const result = await api("POST", `${base}/members`, ApiForm.read(fields));
      if (!result.ok) return fail(box, fields, result);
      ApiForm.showErrors(fields, {});
      toast(`${result.data.user} added as ${result.data.role}`);
      fields.querySelector("input[name=user]").value = "";
      loadMembers();
    });
  }

  (async () => {
    if (manager) {
      document.getElementById("quota-form").addEventListener("submit", saveQuotas);
      try { await setUpMemberForm(); } catch (err) { toast(err.message, "error"); }
    }
    await Promise.all([loadQuotas(), loadMembers()]);
  })();
})();
