// The workspace's batches (GET /batches, newest first, filtered by status): each one's
// progress from its request_counts (answers so far while it runs), and the chosen one's detail
// (#<batch id>): its times, its input, output and error files to download, its first error
// lines. Those with the `write` right may cancel a batch while it is validating or in
// progress. The page refreshes every 3 s while a batch it shows runs.
"use strict";

(() => {
  const {api, el, badge, when, ago, enc, toast, confirm, config} = Wharf;
  const body = document.querySelector("#batches tbody");
  const detail = document.getElementById("batch-detail");
  const filter = document.getElementById("batch-status");
  const mayCancel = config.rights.includes("write");
  const RUNNING = new Set(["validating", "in_progress", "finalizing", "cancelling"]);
  const CANCELLABLE = new Set(["validating", "in_progress"]);
  const ERROR_LINES = 50;
  const EVERY_MS = 3000;
  let timer = null;

  const why = (result) => (result.data && result.data.detail) || `The API answered ${result.status}.`;
  const chosen = () => decodeURIComponent(location.hash.slice(1));
  // OpenAI's times are Unix seconds.
  const at = (seconds) => (seconds === null || seconds === undefined ? null : new Date(seconds * 1000));
  const download = (fileId) => `${config.api}/files/${enc(fileId)}/content`;

  function progress(batch) {
    const counts = batch.request_counts;
    const done = counts.completed + counts.failed;
    const share = counts.total ? Math.round((100 * done) / counts.total) : RUNNING.has(batch.status) ? 0 : 100;
    const failed = counts.failed ? ` · ${counts.failed} failed` : "";
    return el("div.batch-progress", {dataset: {done: String(done), total: String(counts.total)}},
      el("div.progress-bar", {title: `${share}%`}, el("span", {style: `width: ${share}%`})),
      el("span.sub", `${done}/${counts.total}${failed}`));
  }

  function cancelButton(batch) {
    if (!mayCancel || !CANCELLABLE.has(batch.status)) return null;
    return el("button.btn.small.danger", {type: "button", dataset: {action: "cancel"},
      onclick: (event) => { event.stopPropagation(); cancelBatch(batch); }}, "Cancel");
  }

  function services(batch) {
    return batch.services.length ? batch.services.join(", ") : el("span.muted", RUNNING.has(batch.status) ? "none yet" : "—");
  }

  function row(batch) {
    const expires = RUNNING.has(batch.status) ? when(at(batch.expires_at)) : el("span.muted", "ended");
    return el("tr", {dataset: {batch: batch.id, status: batch.status},
      class: batch.id === chosen() ? "selected clickable" : "clickable",
      onclick: () => { location.hash = batch.id; }},
      el("td", el("a", {href: `#${batch.id}`}, el("code", batch.id))),
      el("td", el("code", batch.endpoint)),
      el("td", services(batch)),
      el("td.state", badge(batch.status)),
      el("td", progress(batch)),
      el("td", el("span.nowrap", {title: when(at(batch.created_at))}, ago(at(batch.created_at)))),
      el("td.nowrap", expires),
      el("td.right", cancelButton(batch)));
  }

  function fileLinks(batch) {
    const files = [["input", "Input", batch.input_file_id], ["output", "Output", batch.output_file_id],
      ["error", "Error", batch.error_file_id]].filter(([, , id]) => id);
    return files.map(([kind, label, id]) => el("a.btn.small", {href: download(id), download: "",
      dataset: {file: kind}}, `${label} file`));
  }

  const TIMES = [["created_at", "Created"], ["in_progress_at", "Started"], ["expires_at", "Expires"],
    ["finalizing_at", "Finalizing"], ["completed_at", "Completed"], ["cancelling_at", "Cancelling"],
    ["cancelled_at", "Cancelled"], ["expired_at", "Expired"], ["failed_at", "Failed"]];

  function facts(batch) {
    const counts = batch.request_counts;
    const rows = [
      ["Status", badge(batch.status)], ["Endpoint", el("code", batch.endpoint)],
      ["Services", services(batch)],
      ["Requests", `${counts.total} in all: ${counts.completed} completed, ${counts.failed} failed`],
      ["Progress", progress(batch)],
      ...TIMES.filter(([name]) => batch[name]).map(([name, label]) => [label, when(at(batch[name]))]),
    ];
    if (batch.metadata && Object.keys(batch.metadata).length) {
      rows.push(["Metadata", el("code", JSON.stringify(batch.metadata))]);
    }
    rows.push(["Files", fileLinks(batch).length ? el("span.file-links", fileLinks(batch))
      : el("span.muted", "none yet: the output and error files are written when it ends")]);
    return el("dl.kv", rows.flatMap(([k, v]) => [el("dt", k), el("dd", v)]));
  }

  function errorTable(errors, batch) {
    if (!errors.ok) return el("p.field-error", why(errors));
    const lines = errors.data.data;
    if (!lines.length) return el("p.muted", RUNNING.has(batch.status) ? "No errors so far." : "No errors.");
    const more = errors.data.has_more ? el("p.muted", `The first ${ERROR_LINES} shown; the error file has them all.`) : null;
    return el("div", el("table.table", {id: "batch-errors"},
      el("thead", el("tr", el("th", "custom_id"), el("th", "Code"), el("th", "Message"))),
      el("tbody", lines.map((line) => el("tr",
        el("td", el("code", line.custom_id || "")), el("td", el("code", (line.error || {}).code || "")),
        el("td", (line.error || {}).message || ""))))), more);
  }

  // The chosen batch, or none; whether it still runs.
  async function showDetail() {
    const id = chosen();
    if (!id) {
      detail.hidden = true;
      return false;
    }
    const [found, errors] = await Promise.all([api("GET", `/batches/${enc(id)}`),
      api("GET", `/batches/${enc(id)}/errors?limit=${ERROR_LINES}`)]);
    detail.hidden = false;
    if (!found.ok) {
      detail.replaceChildren(el("p.field-error", why(found)));
      return false;
    }
    const batch = found.data;
    detail.dataset.batch = batch.id;
    detail.replaceChildren(
      el("div.editor-bar", el("h2", "Batch ", el("code", batch.id)),
        el("div.actions", cancelButton(batch),
          el("button.btn.small", {type: "button", onclick: () => { location.hash = ""; }}, "Close"))),
      facts(batch), el("h3", "Errors"), errorTable(errors, batch));
    return RUNNING.has(batch.status);
  }

  async function load() {
    clearTimeout(timer);
    const query = filter.value ? `?status=${enc(filter.value)}` : "";
    const result = await api("GET", `/batches${query}`);
    if (!result.ok) {
      body.replaceChildren(el("tr", el("td.field-error", {colspan: 8}, why(result))));
      return;
    }
    body.replaceChildren(...(result.data.length ? result.data.map(row)
      : [el("tr", el("td.muted", {colspan: 8}, filter.value ? "No batches with this status."
        : "No batches in this workspace yet."))]));
    const detailRuns = await showDetail();
    if (detailRuns || result.data.some((batch) => RUNNING.has(batch.status))) {
      timer = setTimeout(load, EVERY_MS);
    }
  }

  async function cancelBatch(batch) {
    const sure = await confirm({title: `Cancel batch ${batch.id}?`, action: "Cancel batch", danger: true,
      message: ["Its waiting requests are dropped; those in work finish and go to its output file.",
        "This cannot be undone."]});
    if (!sure) return;
    const result = await api("POST", `/batches/${enc(batch.id)}/cancel`);
    toast(result.ok ? `Batch ${batch.id}: ${result.data.status}` : why(result), result.ok ? "" : "error");
    load();
  }

  filter.addEventListener("change", load);
  document.getElementById("batch-refresh").addEventListener("click", load);
  window.addEventListener("hashchange", load);
  load();
})();
