// Build one anywidget ESM per view (src/widgets/<name>.ts → forgeviz/static/<name>.js, for each
// view in forgeviz/views.json, the one list of views) and the Graphviz fallback bundle
// (forgeviz/static/graphviz.js) with esbuild.
//   node scripts/build-esm.mjs          production (minified)
//   node scripts/build-esm.mjs --dev    development (source maps, readable)
import * as esbuild from 'esbuild';
import { readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const dev = process.argv.includes('--dev');
const outdir = path.join(root, 'forgeviz', 'static');
const DEFAULT_BUDGET_KIB = 60;
const viewList = JSON.parse(await readFile(path.join(root, 'forgeviz', 'views.json'), 'utf8')).views;
const views = viewList.map(v => v.name);
const budget = Object.fromEntries(viewList.map(v => [`${v.name}.js`, (v.budget_kib ?? DEFAULT_BUDGET_KIB) * 1024]));

/** `import css from './x.css?raw'` → the minified stylesheet as a string. */
const rawCss = {
  name: 'raw-css',
  setup(build) {
    build.onResolve({ filter: /\.css\?raw$/ }, args => ({
      path: path.resolve(args.resolveDir, args.path.replace(/\?raw$/, '')),
      namespace: 'raw-css'
    }));
    build.onLoad({ filter: /.*/, namespace: 'raw-css' }, async args => {
      const source = await readFile(args.path, 'utf8');
      const { code } = await esbuild.transform(source, { loader: 'css', minify: !dev });
      return { contents: code, loader: 'text', watchFiles: [args.path] };
    });
  }
};

const common = {
  bundle: true,
  format: 'esm',
  target: 'es2020',
  platform: 'browser',
  minify: !dev,
  // No inline source map even in dev: anywidget re-sends the ESM with every instance.
  sourcemap: false,
  legalComments: 'none',
  logLevel: 'warning',
  define: { 'process.env.NODE_ENV': dev ? '"development"' : '"production"' },
  // gifenc's "browser" field is its CommonJS build; its ESM build is 2 KB smaller
  mainFields: ['module', 'main']
};

await Promise.all([
  ...views.map(name =>
    esbuild.build({
      ...common,
      entryPoints: [path.join(root, 'src', 'widgets', `${name}.ts`)],
      outfile: path.join(outdir, `${name}.js`),
      plugins: [rawCss]
    })
  ),
  esbuild.build({
    ...common,
    // Already a minified bundle upstream; keep it minified in dev too.
    minify: true,
    entryPoints: [path.join(root, 'src', 'graphviz-bundle.ts')],
    outfile: path.join(outdir, 'graphviz.js')
  })
]);

const size = async name => (await stat(path.join(outdir, name))).size;
let over = false;
// anywidget re-sends each widget ESM with every instance: each has its own budget.
for (const name of views.map(v => `${v}.js`)) {
  const bytes = await size(name);
  console.log(`forgeviz/static/${name.padEnd(13)}${bytes} bytes${dev ? ' (dev)' : ''}`);
  if (!dev && bytes > budget[name]) {
    console.error(`${name} is ${bytes} bytes, over its ${budget[name]} byte budget in forgeviz/views.json (anywidget re-sends it per instance)`);
    over = true;
  }
}
console.log(`forgeviz/static/graphviz.js ${await size('graphviz.js')} bytes`);
if (over) {
  process.exit(1);
}
