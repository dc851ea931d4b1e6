// Service groups: each group of the acting workspace with its mode, endpoint and members,
// polled every 3 s. Writers change the traffic mode and the session header, set every
// member's weight in one PATCH (so a blue-green switch is one call), and release a member
// into the group's traffic or make it standalone (POST /services/<name>/release). The API's
// errors show next to the field they name. Cards are kept across polls, so a value being
// typed is never overwritten: an edited field follows the API again once it is applied.
"use strict";

(() => {
  const {api, el, badge, enc, toast, config} = Wharf;
  const root = document.getElementById("groups");
  const writer = config.rights.includes("write");
  const cards = new Map(); // group name -> its card's nodes and the fields being edited
  let scrolled = false;

  const why = (result) => (result.data && result.data.detail) || `The API answered ${result.status}.`;

  // A share of the group's traffic (0-1) as the CLI writes it: 90%, 33.3%, 0%.
  const percent = (share) => `${Math.round(share * 1000) / 10}%`;

  async function load() {
    const result = await api("GET", "/groups");
    if (!result.ok) {
      cards.clear();
      root.replaceChildren(el("p.field-error", why(result)));
      return;
    }
    render(result.data);
  }

  // Cards are moved only when the list changes: moving a node would blur a field being edited.
  function place(parent, nodes) {
    const kept = nodes.length === parent.children.length
      && nodes.every((node, i) => parent.children[i] === node);
    if (!kept) parent.replaceChildren(...nodes);
  }

  function render(groups) {
    const names = new Set(groups.map((g) => g.name));
    for (const name of [...cards.keys()]) if (!names.has(name)) cards.delete(name);
    const nodes = groups.map((g) => (cards.get(g.name) || create(g)).node);
    place(root, nodes.length ? nodes : [el("p.muted", "No service groups in this workspace. ",
      "A service joins one by naming it in metadata.group.")]);
    for (const group of groups) update(cards.get(group.name), group);
    if (!scrolled && groups.length) {
      scrolled = true;
      const target = location.hash && document.getElementById(location.hash.slice(1));
      if (target) target.scrollIntoView();
    }
  }

  const errorSlot = (path) => el("div.field-error", {dataset: {errorPath: path}, hidden: true});

  function create(group) {
    const name = group.name;
    const card = {name, edited: new Set(), rows: new Map()};
    const edit = (key) => () => card.edited.add(key);
    if (writer) {
      card.mode = el("select", {name: "traffic_mode", onchange: () => setMode(card)},
        config.trafficModes.map((mode) => el("option", {value: mode}, mode)));
      card.header = el("input", {name: "session_header", oninput: edit("session_header"),
        spellcheck: false, autocomplete: "off"});
    } else {
      card.mode = el("span.group-mode");
      card.header = el("code.group-header");
    }
    card.endpoint = el("div.endpoint");
    card.openai = el("div.endpoint");
    card.error = el("div.alert.error", {dataset: {errorPath: "detail"}, hidden: true});
    card.members = el("tbody");
    card.node = el("section.card.group-card", {id: `group-${name}`, dataset: {group: name}},
      el("h2", name),
      el("dl.kv",
        el("dt", "EAS endpoint"), el("dd", card.endpoint),
        el("dt", "OpenAI"), el("dd", card.openai),
        el("dt", "Traffic mode"), el("dd", card.mode, errorSlot("traffic_mode")),
        el("dt", "Session header"), el("dd.group-field", card.header, writer
          ? el("button.btn.small", {type: "button", dataset: {action: "session-header"},
              onclick: () => setHeader(card)}, "Save")
          : null, errorSlot("session_header"))),
      card.error,
      el("table.table.members",
        el("thead", el("tr", el("th", "Member"), el("th", "State"), el("th", "Weight"),
          el("th", "Ready instances"), el("th", "Share now"), writer ? el("th.right", "Traffic") : null)),
        card.members),
      writer ? el("div.group-actions",
        el("button.btn.primary", {type: "button", dataset: {action: "apply-weights"},
          onclick: () => applyWeights(card)}, "Apply weights"),
        el("span.muted", " Weights count in customized mode; applying them switches the group to it."))
        : null);
    cards.set(name, card);
    return card;
  }

  function update(card, group) {
    card.endpoint.textContent = group.endpoints.eas;
    card.openai.textContent = `${group.endpoints.openai}  model "${group.endpoints.model}"`;
    if (!writer) {
      card.mode.textContent = group.traffic_mode;
      card.header.textContent = group.session_header;
    } else {
      if (document.activeElement !== card.mode) card.mode.value = group.traffic_mode;
      if (!card.edited.has("session_header")) card.header.value = group.session_header;
    }
    const names = new Set(group.members.map((m) => m.service));
    for (const name of [...card.rows.keys()]) if (!names.has(name)) card.rows.delete(name);
    place(card.members, group.members.map((m) => (card.rows.get(m.service) || row(card, m)).node));
    for (const member of group.members) updateRow(card, card.rows.get(member.service), member);
  }

  function row(card, member) {
    const name = member.service;
    const parts = {};
    parts.state = el("td.state");
    parts.weight = writer
      ? el("input.weight", {type: "number", min: "0", max: String(config.maxWeight), step: "1",
          name: `weights.${name}`, dataset: {member: name}, oninput: () => card.edited.add(name)})
      : el("span.weight");
    parts.ready = el("td.ready");
    parts.share = el("td.share");
    parts.release = writer ? el("button.btn.small", {type: "button", dataset: {action: "release"},
      onclick: () => release(card, parts)}) : null;
    parts.node = el("tr", {dataset: {member: name}},
      el("td", el("a.name", {href: `/services/${enc(name)}/`}, name)),
      parts.state,
      el("td", parts.weight, errorSlot(`weights.${name}`)),
      parts.ready,
      parts.share,
      writer ? el("td.right.nowrap", parts.release, errorSlot("traffic_state")) : null);
    parts.name = name;
    card.rows.set(name, parts);
    return parts;
  }

  function updateRow(card, parts, member) {
    parts.member = member;
    parts.state.replaceChildren(badge(member.traffic_state));
    if (!writer) parts.weight.textContent = String(member.weight);
    else if (!card.edited.has(member.service)) parts.weight.value = String(member.weight);
    parts.ready.textContent = String(member.ready_instances);
    const share = member.traffic_state === "grouping" ? member.share : 0;
    parts.share.replaceChildren(el("div.share-bar", el("span", {style: `width: ${share * 100}%`})),
      el("span.share-text", member.traffic_state === "grouping" ? percent(share) : "standalone"));
    if (parts.release) {
      const released = member.traffic_state === "grouping";
      parts.release.textContent = released ? "Standalone" : "Release";
      parts.release.title = released
        ? "Take it out of the group's traffic: only its own endpoint reaches it"
        : "Let it take the group's traffic";
    }
  }

  // ---- changes ---------------------------------------------------------------------------

  // A field's error where the page has its slot (`scope` first, then the card); the rest,
  // with the API's own words, above the members.
  function showErrors(card, scope, result) {
    for (const slot of card.node.querySelectorAll(".field-error")) {
      slot.textContent = "";
      slot.hidden = true;
    }
    card.error.hidden = true;
    if (result.ok) return;
    const errors = (result.data && result.data.errors) || {};
    const rest = [];
    for (const [path, messages] of Object.entries(errors)) {
      const selector = `.field-error[data-error-path="${CSS.escape(path)}"]`;
      const slot = scope.querySelector(selector) || card.node.querySelector(selector);
      const text = [].concat(messages).join(" ");
      if (slot) {
        slot.textContent = text;
        slot.hidden = false;
      } else {
        rest.push(`${path}: ${text}`);
      }
    }
    // With every error at its field, the API's general words ("The request is invalid.") add
    // nothing.
    if (rest.length || !Object.keys(errors).length) {
      card.error.textContent = [why(result), ...rest].join(" ");
      card.error.hidden = false;
    }
  }

  async function send(card, scope, button, call, done) {
    if (button) button.disabled = true;
    try {
      const result = await call();
      showErrors(card, scope, result);
      if (!result.ok) return;
      done();
      update(card, result.data);
      toast(`${card.name}: saved`);
    } finally {
      if (button) button.disabled = false;
    }
  }

  const patch = (card, body) => () => api("PATCH", `/groups/${enc(card.name)}`, body);

  // A weight as typed: a whole number is sent as one, anything else as it is, for the API
  // to refuse by the member's field.
  function weight(text) {
    const trimmed = text.trim();
    return /^\d+$/.test(trimmed) ? Number(trimmed) : trimmed;
  }

  function applyWeights(card) {
    const weights = {};
    for (const [name, parts] of card.rows) weights[name] = weight(parts.weight.value);
    const button = card.node.querySelector("[data-action=apply-weights]");
    return send(card, card.node, button, patch(card, {weights}),
      () => { for (const name of card.rows.keys()) card.edited.delete(name); });
  }

  function setMode(card) {
    return send(card, card.node, null, patch(card, {traffic_mode: card.mode.value}), () => {});
  }

  function setHeader(card) {
    const button = card.node.querySelector("[data-action=session-header]");
    return send(card, card.node, button, patch(card, {session_header: card.header.value.trim()}),
      () => card.edited.delete("session_header"));
  }

  function release(card, parts) {
    const state = parts.member.traffic_state === "grouping" ? "standalone" : "grouping";
    const call = () => api("POST", `/services/${enc(parts.name)}/release`, {traffic_state: state});
    return send(card, parts.node, parts.release, call, () => {});
  }

  Wharf.poll(load, 3000);
})();
