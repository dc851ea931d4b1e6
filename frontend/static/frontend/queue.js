// The Overview tab's Queue card, for an Async service (metadata.type "Async"): items waiting
// for an instance, in work, given back to go again, the oldest wait, and answers waiting in the
// sink, from /services/<name>/queue every 3 s while the tab is open. A service without queues
// (the API answers 404) keeps the card hidden.
"use strict";

(() => {
  const {api, el, enc, config} = Wharf;
  const panel = document.querySelector('[data-panel="overview"]');
  const card = document.querySelector("#queue-card");
  const box = document.querySelector("#queue-figures");
  if (!panel || !card || !box) return;
  let queued = true;  // until the API says the service has no queues

  const age = (s) => (s >= 3600 ? `${(s / 3600).toFixed(1)} h` : s >= 60 ? `${Math.round(s / 60)} min` : `${Math.round(s)} s`);

  function render(q) {
    const rows = [
      ["Waiting", `${q.input.pending} of at most ${q.input.max_length}`],
      ["In work", `${q.input.working} (each instance takes ${q.window} at once)`],
      ["Oldest wait", q.input.pending ? age(q.input.oldest_pending_s) : "none waiting"],
      ["Given back, to go again", `${q.input.redelivering} (an item goes at most ${q.max_delivery} times)`],
      ["Answers in the sink", `${q.sink.length} of at most ${q.sink.max_length}`],
      ["Failed after every delivery", String(q.sink.failed)],
    ];
    box.replaceChildren(...rows.flatMap(([k, v]) => [el("dt", k), el("dd", v)]));
  }

  async function load() {
    if (panel.hidden || !queued) return;
    const result = await api("GET", `/services/${enc(config.service)}/queue`);
    if (result.status === 404) {
      queued = false;
      card.hidden = true;
      return;
    }
    card.hidden = false;
    if (!result.ok) {
      box.replaceChildren(el("p.field-error", (result.data && result.data.detail) || `The API answered ${result.status}.`));
      return;
    }
    render(result.data);
  }

  const poller = Wharf.poll(load, 3000);
  new MutationObserver(() => { if (!panel.hidden) poller.now(); })
    .observe(panel, {attributes: true, attributeFilter: ["hidden"]});
})();
