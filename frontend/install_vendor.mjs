// npm ci's postinstall: Monaco's AMD build (min/vs: the editor, its JSON language and workers,
// loadable without a bundler) copied where Django's static files finder serves it, with its
// licence. What an earlier install put there is removed first, so no stale file outlives an
// upgrade. The target is ignored by git; the page falls back to a text area without it.
import {cpSync, rmSync} from "node:fs";

const monaco = new URL("node_modules/monaco-editor/", import.meta.url);
const target = new URL("static/frontend/vendor/monaco/", import.meta.url);

rmSync(target, {recursive: true, force: true});
cpSync(new URL("min/vs/", monaco), new URL("vs/", target), {recursive: true});
cpSync(new URL("LICENSE", monaco), new URL("LICENSE", target));
console.log(`Monaco copied to ${target.pathname}`);
