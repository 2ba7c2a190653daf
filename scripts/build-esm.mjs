// Build one anywidget ESM per view (src/widgets/<name>.ts → forgeviz/static/<name>.js, for each
// view in forgeviz/views.json, the one list of views) and the Graphviz fallback bundle
// (forgeviz/static/graphviz.js) with esbuild; the saved-output stand-in for the offline HTML page
// (forgeviz/static/saved.js); and the headless renderer (src/headless/index.ts →
// forgeviz/static/headless.js: an IIFE for a bare V8, with happy-dom and Graphviz, that Python's
// forgeviz.headless runs; not a view).
//   node scripts/build-esm.mjs          production (minified)
//   node scripts/build-esm.mjs --dev    development (source maps, readable)
import * as esbuild from 'esbuild';
import { readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import { builtinModules } from 'node:module';
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

/** happy-dom imports Node builtins it never calls in our use: each is src/headless/node-builtins.cjs. */
const nodeBuiltins = {
  name: 'node-builtins',
  setup(build) {
    const names = builtinModules.map(m => m.replace(/[/]/g, '\\/')).join('|');
    build.onResolve({ filter: new RegExp(`^(node:)?(${names}|ws)$`) }, () => ({ path: path.join(root, 'src', 'headless', 'node-builtins.cjs') }));
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
  }),
  // the saved-output stand-in (src/lab/saved.ts) as a classic script for the offline HTML page
  // (forgeviz/widgets/page.py): ``forgevizSaved.mountSaved(el, payload, entry)``
  esbuild.build({
    ...common,
    entryPoints: [path.join(root, 'src', 'lab', 'saved.ts')],
    outfile: path.join(outdir, 'saved.js'),
    format: 'iife',
    globalName: 'forgevizSaved'
  }),
  esbuild.build({
    ...common,
    entryPoints: [path.join(root, 'src', 'headless', 'index.ts')],
    outfile: path.join(outdir, 'headless.js'),
    format: 'iife',
    target: 'es2022',
    // happy-dom's ESM build, with the builtins it imports stubbed; the globals a bare V8 lacks first
    conditions: ['node', 'import'],
    banner: { js: await readFile(path.join(root, 'src', 'headless', 'prelude.js'), 'utf8') },
    plugins: [rawCss, nodeBuiltins]
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
console.log(`forgeviz/static/headless.js ${await size('headless.js')} bytes (run in Python, not sent to the page)`);
if (over) {
  process.exit(1);
}
