// Copy forgeviz/static/graphviz.js into the Lab extension's static folder, where Lab serves it at
// <fullLabextensionsUrl>/forgeviz/static/graphviz.js: the graph view's layout worker imports Graphviz
// from there, so a page with the extension never asks the kernel for 800 KB (src/lab/index.ts).
import { copyFileSync, existsSync, mkdirSync } from 'node:fs';
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
