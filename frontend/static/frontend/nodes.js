// The nodes list: polled every 2 s; staff may cordon, drain (after a confirmation) and
// uncordon a node. Each node's cards (and the instance holding each), images and cached
// models unfold under its name; the host leading the periodic work (beat) is named above.
"use strict";

(() => {
  const {api, el, badge, timeCell, enc, toast, confirm, config} = Wharf;
  const body = document.querySelector("#nodes tbody");

  async function load() {
    const result = await api("GET", "/nodes");
    if (!result.ok) {
      body.replaceChildren(el("tr", el("td", {colspan: 11, class: "field-error"},
        (result.data && result.data.detail) || `The API answered ${result.status}.`)));
      return;
    }
    body.replaceChildren(...(result.data.length ? result.data.map(row)
      : [el("tr", el("td", {colspan: 11, class: "muted"}, "No node has registered yet."))]));
  }

  function cards(node) {
    const kinds = Object.entries(node.card_counts);
    if (!kinds.length) return "none";
    return kinds.map(([kind, n]) => `${n.free}/${n.total} ${kind.toUpperCase()}`).join(", ");
  }

  function row(node) {
    const act = (action) => async () => {
      if (action === "drain" && !await confirm({title: `Drain ${node.name}?`, action: "Drain",
        danger: true, message: "Its instances are replaced on other nodes, then stopped here."})) return;
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
      el("td", el("span.name", node.name), el("span.sub", `${node.runtime} · ${node.version}`),
        details(node)),
      el("td.state", badge(node.state)),
      el("td", node.address),
      el("td.nowrap", cards(node)),
      el("td", String(node.cpus)),
      el("td.nowrap", `${(node.memory_mb / 1024).toFixed(1)} GiB`),
      el("td.nowrap", `${(node.disk_mb / 1024).toFixed(1)} GiB`),
      el("td", node.instances.length
        ? node.instances.map((i) => el("div", el("a", {href: `/services/${enc(i.service)}/`},
            i.name), " ", badge(i.state)))
        : el("span.muted", "none")),
      el("td", labels || el("span.muted", "none")),
      el("td", timeCell(node.heartbeat_at)),
      el("td.right.nowrap", ...buttons));
  }

  // Kept open across polls: the row is rebuilt every 2 s.
  const open = new Set();
  function details(node) {
    const list = (items) => (items.length ? el("ul", items.map((i) => el("li", i)))
      : el("span.muted", "none"));
    return el("details", {open: open.has(node.name),
      ontoggle: (e) => (e.target.open ? open.add(node.name) : open.delete(node.name))},
      el("summary.sub", "cards, images, models"),
      el("dl.kv",
        el("dt", "Cards"), el("dd", list(node.cards.map((c) =>
          `${c.kind.toUpperCase()} ${c.index}: ${c.instance || "free"}`))),
        el("dt", "Images"), el("dd", list(node.images)),
        el("dt", "Cached models"), el("dd", list(node.cached_models))));
  }

  async function leader() {
    const result = await api("GET", "/beat");
    document.getElementById("beat-leader").textContent = result.ok
      ? `Periodic work (beat) runs on ${result.data.leader || "no host yet"}.`
      : (result.data && result.data.detail) || "";
  }

  const refresher = Wharf.poll(load, 2000);
  Wharf.poll(leader, 15000);
})();
