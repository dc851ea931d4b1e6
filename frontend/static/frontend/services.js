// The services list: polled every 2 s, filtered by phase, with start/stop/scale/delete.
"use strict";

(() => {
  const {api, el, badge, timeCell, engineOf, instanceSummary, progressNode, actions, enc} = Wharf;
  const body = document.querySelector("#services tbody");
  const filter = document.getElementById("phase-filter");
  filter.value = new URLSearchParams(location.search).get("phase") || "";

  async function load() {
    const query = filter.value ? `?phase=${enc(filter.value)}` : "";
    const result = await api("GET", `/services${query}`);
    if (!result.ok) {
      body.replaceChildren(el("tr", el("td", {colspan: 8, class: "field-error"},
        (result.data && result.data.detail) || `The API answered ${result.status}.`)));
      return;
    }
    // Roles (prefill/decode) are only on the instances, so those services need one more call.
    const roles = await Promise.all(result.data.map((s) => (s.spec.llm && s.spec.llm.pd)
      ? api("GET", `/services/${enc(s.name)}/instances`).then((r) => (r.ok ? r.data : null))
      : null));
    render(result.data, roles);
  }

  function render(services, roles) {
    if (!services.length) {
      const text = filter.value ? `No ${filter.value} services.` : "No services yet. ";
      body.replaceChildren(el("tr", el("td", {colspan: 8, class: "muted"}, text,
        filter.value ? null : el("a", {href: "/deploy/"}, "Deploy one"))));
      return;
    }
    body.replaceChildren(...services.map((service, i) => row(service, roles[i])));
  }

  function row(service, instances) {
    const name = service.name;
    const stopped = service.desired_state === "stopped";
    const act = (action) => async () => {
      if (await actions[action](name)) refresher.now();
    };
    return el("tr", {dataset: {service: name}},
      el("td", el("a.name", {href: `/services/${enc(name)}/`}, name),
        service.spec.llm && service.spec.llm.model ? el("span.sub", service.spec.llm.model) : null),
      el("td", engineOf(service.spec)),
      el("td.phase", badge(service.phase), progressNode(service)),
      el("td.instances.nowrap", instanceSummary(service, instances)),
      el("td", el("div.endpoint", service.endpoints.eas)),
      el("td", timeCell(service.created_at)),
      el("td", timeCell(service.updated_at)),
      el("td.right.nowrap",
        stopped
          ? el("button.btn.small", {onclick: act("start")}, "Start")
          : el("button.btn.small", {onclick: act("stop")}, "Stop"),
        " ", el("button.btn.small", {onclick: act("scale")}, "Scale"),
        " ", el("button.btn.small.danger", {onclick: act("delete")}, "Delete")));
  }

  filter.addEventListener("change", () => {
    const url = new URL(location.href);
    if (filter.value) url.searchParams.set("phase", filter.value);
    else url.searchParams.delete("phase");
    history.replaceState(null, "", url);
    refresher.now();
  });

  const refresher = Wharf.poll(load, 2000);
})();
