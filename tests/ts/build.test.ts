/**
 * Checks on the built assets (run after `jlpm build:prod`; skipped when they
 * are absent). The anywidget ESM is re-sent with every widget instance, so it
 * must stay small and never carry Graphviz; the Lab extension must load the
 * WASM lazily.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { expectWidgetBundle } from './bundle';

const root = process.cwd();
const staticDir = path.join(root, 'forgeviz', 'static');
const labDir = path.join(root, 'forgeviz', 'labextension');
const WASM_LOADER = 'WebAssembly.instantiate';

describe.skipIf(!existsSync(path.join(staticDir, 'graph.js')))('forgeviz/static', () => {
  it('graph.js is a small ESM without Graphviz', () => {
    expectWidgetBundle(path.join(staticDir, 'graph.js'));
  });

  it('graphviz.js is an ESM exporting a working Graphviz', async () => {
    const file = path.join(staticDir, 'graphviz.js');
    const mod = await import(/* @vite-ignore */ pathToFileURL(file).href);
    const gv = await mod.Graphviz.load();
    expect(gv.layout('digraph { n1 -> n2 }', 'json', 'dot')).toContain('"n2"');
  });
});

describe.skipIf(!existsSync(path.join(labDir, 'package.json')))('forgeviz/labextension', () => {
  it('serves the Graphviz WASM as static/graphviz.js, outside the plugin and its entry', () => {
    const pkg = JSON.parse(readFileSync(path.join(labDir, 'package.json'), 'utf8'));
    expect(pkg.name).toBe('forgeviz');
    const load: string = pkg.jupyterlab._build.load;
    const files = readdirSync(path.join(labDir, 'static')).filter(f => f.endsWith('.js'));
    const withWasm = files.filter(f => readFileSync(path.join(labDir, 'static', f), 'utf8').includes(WASM_LOADER));
    expect(withWasm).toEqual(['graphviz.js']);
    expect(readFileSync(path.join(labDir, 'static', 'graphviz.js'))).toEqual(readFileSync(path.join(staticDir, 'graphviz.js')));
    expect(`static/${withWasm[0]}`).not.toBe(load);
    // the plugin chunk (the one holding the plugin id) must not contain it either
    const pluginChunks = files.filter(f =>
      readFileSync(path.join(labDir, 'static', f), 'utf8').includes('forgeviz:plugin')
    );
    expect(pluginChunks.length).toBeGreaterThan(0);
    expect(pluginChunks).not.toContain(withWasm[0]);
    expect(statSync(path.join(labDir, load)).size).toBeLessThan(100 * 1024);
  });
});
