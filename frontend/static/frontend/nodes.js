// The nodes list: polled every 2 s; staff may cordon, drain and uncordon a node.
"use strict";

(() => {
  const {api, el, badge, timeCell, enc, toast, config} = Wharf;
  const body = document.querySelector("#nodes tbody");

  async function load() {
    const result = await api("GET", "/nodes");
    if (!result.ok) {
      body.replaceChildren(el("tr", el("td", {colspan: 10, class: "field-error"},
        (result.data && result.data.detail) || `The API answered ${result.status}.`)));
      return;
    }
    body.replaceChildren(...(result.data.length ? result.data.map(row)
      : [el("tr", el("td", {colspan: 10, class: "muted"}, "No node has registered yet."))]));
  }

  function cards(node) {
    const kinds = Object.entries(node.card_counts);
    if (!kinds.length) return "none";
    return kinds.map(([kind, n]) => `${n.free}/${n.total} ${kind.toUpperCase()}`).join(", ");
  }

  function row(node) {
    const act = (action) => async () => {
      const result = await api("POST", `/nodes/${enc(node.name)}/${action}`);
      toast(result.ok ? `${node.name}: ${result.data.state}`
        : (result.data && result.data.detail) || `The API answered ${result.status}.`);
      refresher.now();
    };
    const buttons = !config.staff ? [] : node.cordoned || node.draining
      ? [el("button.btn.small", {onclick: act("uncordon")}, "Uncordon")]
      : [el("button.btn.small", {onclick: act("cordon")}, "Cordon"), " ",
         el("button.btn.small.danger", {onclick: act("drain")}, "Drain")];
    const labels = Object.entries(node.labels).map(([k, v]) => `${k}=${v}`).join(", ");
    return el("tr", {dataset: {node: node.name}},
      el("td", el("span.name", node.name), el("span.sub", `${node.runtime} · ${node.version}`)),
      el("td.state", badge(node.state)),
      el("td", node.address),
      el("td.nowrap", cards(node)),
      el("td", String(node.cpus)),
      el("td.nowrap", `${(node.memory_mb / 1024).toFixed(1)} GiB`),
      el("td", node.instances.length
        ? node.instances.map((i) => el("div", el("a", {href: `/services/${enc(i.service)}/`},
            i.name), " ", badge(i.state)))
        : el("span.muted", "none")),
      el("td", labels || el("span.muted", "none")),
      el("td", timeCell(node.heartbeat_at)),
      el("td.right.nowrap", ...buttons));
  }

  const refresher = Wharf.poll(load, 2000);
})();
