// The service page's Online test tab: a chat or completion request sent through the gateway
// as the signed-in user (the console's /console/services/<name>/test), the answer streamed in
// with its first-token time, token count and rate. The model choices are service.js's.
"use strict";

(() => {
  const {el, enc, config} = Wharf;
  const $ = (selector) => document.querySelector(selector);
  const name = config.service;
  let testAbort = null;

  async function sendTest(event) {
    event.preventDefault();
    const form = event.target.elements;
    const out = $("#test-output");
    const meta = $("#test-meta");
    let extra;
    try {
      extra = JSON.parse(form.extra.value.trim() || "{}");
      if (typeof extra !== "object" || Array.isArray(extra) || extra === null) throw new Error("not an object");
    } catch (err) {
      meta.replaceChildren(el("span.field-error", `More parameters must be a JSON object (${err.message}).`));
      return;
    }
    const path = form.path.value;
    const body = {max_tokens: Number(form.max_tokens.value) || 128,
      temperature: Number(form.temperature.value), ...extra};
    if (path === "chat/completions") body.messages = [{role: "user", content: form.prompt.value}];
    else body.prompt = form.prompt.value;

    out.textContent = "";
    meta.replaceChildren(el("span", "Sending…"));
    $("#test-send").disabled = true;
    $("#test-stop").disabled = false;
    testAbort = new AbortController();
    const started = performance.now();
    let first = null;
    let pieces = 0;
    let usage = null;
    let finish = null;
    const showMeta = (state) => {
      const seconds = (performance.now() - (first ?? started)) / 1000;
      const tokens = usage ? usage.completion_tokens : pieces;
      meta.replaceChildren(
        el("span", state),
        first !== null ? el("span", "first token ", el("b", `${Math.round(first - started)} ms`)) : null,
        el("span", el("b", String(tokens)), usage ? " tokens" : " pieces"),
        first !== null && seconds > 0 ? el("span", el("b", (tokens / seconds).toFixed(1)), " tokens/s") : null,
        finish ? el("span", "finish ", el("b", finish)) : null);
    };
    try {
      const response = await fetch(`/console/services/${enc(name)}/test`, {
        method: "POST", credentials: "same-origin", signal: testAbort.signal,
        headers: {"Content-Type": "application/json", "X-CSRFToken": Wharf.csrfToken()},
        body: JSON.stringify({path, body, adapter: form.adapter.value}),
      });
      if (!response.ok) {
        const text = await response.text();
        let message = text;
        try {
          const data = JSON.parse(text);
          message = (data.error && data.error.message) || data.detail || text;
        } catch { /* not JSON: show the text */ }
        meta.replaceChildren(el("span.field-error", `${response.status}: ${message}`));
        return;
      }
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const {value, done} = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, {stream: true});
        const lines = buffer.split("\n");
        buffer = lines.pop();
        for (const line of lines) {
          if (!line.startsWith("data:")) continue;
          const data = line.slice(5).trim();
          if (data === "[DONE]") continue;
          let chunk;
          try { chunk = JSON.parse(data); } catch { continue; }
          if (chunk.error) {
            out.append(el("span.field-error", `\n${chunk.error.message || JSON.stringify(chunk.error)}`));
            continue;
          }
          if (chunk.usage) usage = chunk.usage;
          for (const choice of chunk.choices || []) {
            const text = choice.delta ? choice.delta.content : choice.text;
            if (text) {
              if (first === null) first = performance.now();
              pieces++;
              out.append(text);
              out.scrollTop = out.scrollHeight;
            }
            if (choice.finish_reason) finish = choice.finish_reason;
          }
          showMeta("streaming");
        }
      }
      showMeta("done");
    } catch (err) {
      if (err.name === "AbortError") showMeta("stopped");
      else meta.replaceChildren(el("span.field-error", `The request failed: ${err.message}`));
    } finally {
      $("#test-send").disabled = false;
      $("#test-stop").disabled = true;
      testAbort = null;
    }
  }

  $("#test-form").addEventListener("submit", sendTest);
  $("#test-stop").addEventListener("click", () => testAbort && testAbort.abort());
})();
