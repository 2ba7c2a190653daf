// Copy forgeviz/static/graphviz.js into the Lab extension's static folder, where Lab serves it at
// <fullLabextensionsUrl>/forgeviz/static/graphviz.js: the graph view's layout worker imports Graphviz
// from there, so a page with the extension never asks the kernel for 800 KB (src/lab/index.ts).
// Copy each view's bundle (forgeviz/views.json) into static/views/ too: the renderer of saved outputs
// draws a notebook reopened with no kernel with them (src/lab/mime.ts).
import { copyFileSync, existsSync, mkdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const from = path.join(root, 'forgeviz', 'static', 'graphviz.js');
const to = path.join(root, 'forgeviz', 'labextension', 'static', 'graphviz.js');
if (!existsSync(from)) {
  console.error(`${from} is missing: run scripts/build-esm.mjs first`);
  process.exit(1);
}
mkdirSync(path.dirname(to), { recursive: true });
copyFileSync(from, to);
const views = JSON.parse(readFileSync(path.join(root, 'forgeviz', 'views.json'), 'utf8')).views.map(v => v.name);
mkdirSync(path.join(path.dirname(to), 'views'), { recursive: true });
for (const name of views) {
  const view = path.join(root, 'forgeviz', 'static', `${name}.js`);
  if (!existsSync(view)) {
    console.error(`${view} is missing: run scripts/build-esm.mjs first`);
    process.exit(1);
  }
  copyFileSync(view, path.join(path.dirname(to), 'views', `${name}.js`));
}
