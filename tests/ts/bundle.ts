/** What every built widget bundle (forgeviz/static/<view>.js, after `jlpm build:esm:prod`) must be. */
import { readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { expect } from 'vitest';

/**
 * Small (anywidget re-sends it with every instance), an ESM with a default export (and no named ``render``), offline
 * (no CDN), and without Graphviz (the WASM loader). Returns the bundle's source for more checks.
 */
export function expectWidgetBundle(file: string): string {
  const views = JSON.parse(readFileSync(path.join(process.cwd(), 'forgeviz', 'views.json'), 'utf8')).views as {
    name: string;
    budget_kib?: number;
  }[];
  const view = views.find(v => `${v.name}.js` === path.basename(file));
  expect(view, `${file} is not a view of forgeviz/views.json`).toBeDefined();
  expect(statSync(file).size).toBeLessThanOrEqual((view!.budget_kib ?? 60) * 1024);
  const src = readFileSync(file, 'utf8');
  expect(src).toMatch(/export\s*\{[^}]*as default/);
  // anywidget warns in the console of a bundle that also exports ``render`` by name
  const exported = [...src.matchAll(/export\s*\{([^}]*)\}/g)].flatMap(m => m[1].split(',').map(e => e.trim().split(/\s+as\s+/).pop()));
  expect(exported).toContain('default');
  expect(exported).not.toContain('render');
  expect(src).not.toContain('WebAssembly.instantiate');
  expect(src).not.toMatch(/https?:\/\/(cdn|unpkg|esm\.sh|jsdelivr)/);
  return src;
}
