// The audit trail (GET /audit) with its filters: since, until, service, actor and how many
// entries. The API's objection to a filter shows beside it.
"use strict";

(() => {
  const {api, el, when, enc} = Wharf;
  const form = document.getElementById("audit-filters");
  const failure = document.getElementById("audit-error");
  const body = document.querySelector("#audit tbody");

  function query() {
    const params = new URLSearchParams();
    for (const input of form.querySelectorAll("input")) {
      const value = input.value.trim();
      if (!value) continue;
      params.set(input.name, input.type === "datetime-local" ? new Date(value).toISOString() : value);
    }
    return params;
  }

  function row(entry) {
    const failed = entry.status !== null && entry.status >= 400;
    return el("tr", {dataset: {actor: entry.actor}},
      el("td.nowrap", when(entry.at)), el("td", entry.workspace || el("span.muted", "none")),
      el("td", entry.actor), el("td", entry.via), el("td", el("code", entry.action)),
      el("td", {class: failed ? "field-error" : ""}, entry.status === null ? "" : String(entry.status)),
      el("td", entry.service ? el("a", {href: `/services/${enc(entry.service)}/`}, entry.service) : ""));
  }

  async function load() {
    for (const node of form.querySelectorAll(".field-error")) node.remove();
    failure.hidden = true;
    const result = await api("GET", `/audit?${query()}`);
    if (!result.ok) {
      const errors = (result.data && result.data.errors) || {};
      for (const [name, messages] of Object.entries(errors)) {
        const input = form.querySelector(`[name="${CSS.escape(name)}"]`);
        if (input) input.after(el("div.field-error", {dataset: {errorPath: name}}, messages.join(" ")));
      }
      failure.textContent = (result.data && result.data.detail) || `The API answered ${result.status}.`;
      failure.hidden = false;
      return;
    }
    body.replaceChildren(...(result.data.length ? result.data.map(row)
      : [el("tr", el("td.muted", {colspan: 7}, "No entries match."))]));
  }

  form.addEventListener("submit", (event) => { event.preventDefault(); load(); });
  load();
})();
