// The deploy page's JSON editor: Monaco (npm monaco-editor, whose AMD build `npm ci` in
// frontend/ puts under static/frontend/vendor/monaco), validating and completing the text
// against the spec's schema; a plain text area with line numbers while it loads, and for good
// when its files are absent. Either way the API's field errors are listed and marked at their
// lines, and EAS's // comments are allowed.
"use strict";

const JsonEditor = (() => {
  const {el} = Wharf;
  const MODEL_URI = "inmemory://wharf/spec.json";
  const API_ERRORS = "wharf-api"; // the owner of the API's markers in Monaco

  // Blanks out // and /* */ comments, keeping every newline so positions and line numbers
  // still match the text the user sees.
  function stripComments(text) {
    let out = "";
    let inString = false;
    for (let i = 0; i < text.length; i++) {
      const c = text[i];
      if (inString) {
        out += c;
        if (c === "\\") { out += text[++i] ?? ""; } else if (c === '"') inString = false;
      } else if (c === '"') { inString = true; out += c; }
      else if (c === "/" && text[i + 1] === "/") {
        while (i < text.length && text[i] !== "\n") { out += " "; i++; }
        out += text[i] ?? "";
      } else if (c === "/" && text[i + 1] === "*") {
        while (i < text.length && !(text[i] === "*" && text[i + 1] === "/")) {
          out += text[i] === "\n" ? "\n" : " ";
          i++;
        }
        out += "  ";
        i++;
      } else out += c;
    }
    return out;
  }

  // The line of every value in well-formed JSON, by the API's error path: name,
  // containers[0].port, storage[1].oss.path, …
  function jsonLines(text) {
    const lines = new Map();
    let i = 0;
    let line = 1;
    const ws = () => {
      while (i < text.length && /\s/.test(text[i])) { if (text[i] === "\n") line++; i++; }
    };
    const str = () => {
      const start = ++i;
      while (i < text.length && text[i] !== '"') i += text[i] === "\\" ? 2 : 1;
      const raw = text.slice(start, i++);
      try { return JSON.parse(`"${raw}"`); } catch { return raw; }
    };
    const value = (path, at) => {
      ws();
      if (!lines.has(path)) lines.set(path, at ?? line);
      const c = text[i];
      if (c === "{" || c === "[") {
        const close = c === "{" ? "}" : "]";
        let n = 0;
        i++;
        ws();
        if (text[i] === close) { i++; return; }
        while (i < text.length) {
          ws();
          if (c === "{") {
            const keyLine = line;
            const key = str();
            ws();
            i++; // the colon
            value(path ? `${path}.${key}` : key, keyLine);
          } else {
            value(`${path}[${n++}]`);
          }
          ws();
          if (text[i++] !== ",") return;
        }
      } else if (c === '"') str();
      else while (i < text.length && !/[,\]}\s]/.test(text[i])) i++;
    };
    value("", 1);
    return lines;
  }

  // A missing field's error names a path with no line: its nearest parent has one.
  function lineOf(lines, path) {
    for (let p = path; p; p = p.replace(/(\.[^.[\]]+|\[\d+\])$/, "")) {
      if (lines.has(p)) return lines.get(p);
      if (!/(\.[^.[\]]+|\[\d+\])$/.test(p)) break;
    }
    return 1;
  }

  // {spec, lines} of the text, or {error, lines} naming where it stops being JSON.
  function parse(text) {
    const clean = stripComments(text);
    try {
      return {spec: JSON.parse(clean), lines: jsonLines(clean)};
    } catch (err) {
      const at = /position (\d+)/.exec(err.message);
      const lineMatch = /line (\d+)/.exec(err.message);
      const line = lineMatch ? Number(lineMatch[1])
        : at ? clean.slice(0, Number(at[1])).split("\n").length : 1;
      return {error: {spec: [`not valid JSON: ${err.message}`]}, lines: new Map([["spec", line]])};
    }
  }

  // ---- the plain text area ----------------------------------------------------------------

  function textArea(host, onChange) {
    const text = host.querySelector("textarea");
    const gutter = host.querySelector(".gutter");
    const draw = (bad) => {
      const count = text.value.split("\n").length;
      const spans = [];
      for (let n = 1; n <= count; n++) {
        spans.push(el("span", {class: bad && bad.has(n) ? "bad" : "", title: bad && bad.get(n)}, n));
      }
      gutter.replaceChildren(...spans);
      gutter.scrollTop = text.scrollTop;
    };
    text.addEventListener("input", () => { draw(); onChange(); });
    text.addEventListener("scroll", () => { gutter.scrollTop = text.scrollTop; });
    text.addEventListener("keydown", (event) => {
      if (event.key !== "Tab") return;
      event.preventDefault();
      text.setRangeText("  ", text.selectionStart, text.selectionEnd, "end");
      draw();
    });
    draw();
    return {
      mode: "text",
      getValue: () => text.value,
      setValue(value) { text.value = value; draw(); },
      mark(marks) { draw(new Map(marks.map((m) => [m.line, `${m.path}: ${m.text}`]))); },
      reveal(line) {
        const lines = text.value.split("\n");
        const start = lines.slice(0, line - 1).reduce((sum, l) => sum + l.length + 1, 0);
        text.focus();
        text.setSelectionRange(start, start + (lines[line - 1] || "").length);
        text.scrollTop = Math.max(0, (line - 5) * 20);
      },
    };
  }

  // ---- Monaco --------------------------------------------------------------------------------

  function loadMonaco(base) {
    return new Promise((resolve, reject) => {
      const script = el("script", {src: `${base}/loader.js`});
      script.onerror = () => reject(new Error(`${base}/loader.js did not load`));
      script.onload = () => {
        window.require.config({paths: {vs: base}});
        window.require(["vs/editor/editor.main"], () => resolve(window.monaco), reject);
      };
      document.head.append(script);
    });
  }

  function monacoEditor(monaco, host, value, schema, onChange) {
    // monaco-editor 0.55 moved the JSON language from monaco.languages.json to monaco.json.
    const json = monaco.json || monaco.languages.json;
    json.jsonDefaults.setDiagnosticsOptions({
      validate: true, allowComments: true, enableSchemaRequest: false,
      schemaValidation: "error",
      schemas: schema ? [{uri: new URL(`${Wharf.config.api}/schema/spec`, location.href).href,
        fileMatch: [MODEL_URI], schema}] : [],
    });
    const model = monaco.editor.getModel(monaco.Uri.parse(MODEL_URI))
      || monaco.editor.createModel(value, "json", monaco.Uri.parse(MODEL_URI));
    model.setValue(value);
    const box = el("div.monaco-box");
    host.replaceChildren(box);
    host.classList.add("monaco");
    const editor = monaco.editor.create(box, {
      model, automaticLayout: true, minimap: {enabled: false}, scrollBeyondLastLine: false,
      fontSize: 13, tabSize: 2, fixedOverflowWidgets: true, renderValidationDecorations: "on",
    });
    model.onDidChangeContent(() => onChange());
    return {
      mode: "monaco",
      getValue: () => model.getValue(),
      setValue(text) { model.setValue(text); },
      mark(marks) {
        monaco.editor.setModelMarkers(model, API_ERRORS, marks.map((m) => ({
          severity: monaco.MarkerSeverity.Error, message: `${m.path}: ${m.text}`, source: "Wharf API",
          startLineNumber: m.line, endLineNumber: m.line,
          startColumn: model.getLineFirstNonWhitespaceColumn(m.line) || 1,
          endColumn: model.getLineMaxColumn(m.line),
        })));
      },
      reveal(line) {
        editor.revealLineInCenter(line);
        editor.setSelection(new monaco.Range(line, 1, line, model.getLineMaxColumn(line)));
        editor.focus();
      },
    };
  }

  // The editor in `host` (a text area and its gutter), `note` saying which one it is. The
  // text area serves at once; Monaco takes over with the same text once its files load.
  function create(host, {base, schema, onChange, note, list}) {
    let current = textArea(host, onChange);
    const api = {
      get mode() { return current.mode; },
      getValue: () => current.getValue(),
      setValue: (text) => current.setValue(text),
      reveal: (line) => current.reveal(line),
      ready: null,
      // The API's errors: listed under the editor and marked at their lines.
      showErrors(errors, lines) {
        const marks = Object.entries(errors || {}).map(([path, messages]) =>
          ({path, line: lineOf(lines || new Map(), path), text: [].concat(messages).join(" ")}));
        list.replaceChildren(...marks.map((m) =>
          el("li", {dataset: {path: m.path, line: m.line}, onclick: () => current.reveal(m.line)},
            el("code.path", m.path), " ", m.text, el("span.line", `line ${m.line}`))));
        list.hidden = !marks.length;
        current.mark(marks);
      },
    };
    const fallBack = (why) => {
      note.textContent = `The code editor is not available (${why}); this is a plain text area. ` +
        "Install it with `npm ci` in frontend/ (make console).";
      note.hidden = false;
    };
    api.ready = !base ? Promise.resolve(fallBack("its files are not installed"))
      : loadMonaco(base).then((monaco) => {
        current = monacoEditor(monaco, host, current.getValue(), schema, onChange);
      }, (err) => fallBack(err.message || "it did not load"));
    return api;
  }

  return {create, parse, MODEL_URI};
})();
