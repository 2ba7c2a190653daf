/**
 * forgeviz JupyterLab extension. For now it only provides Graphviz (WASM, in a
 * lazily loaded chunk) to every forgeviz view on the page, so widgets never
 * ask the kernel for it.
 */
import type { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import type { ForgevizGlobal, GraphvizLike } from '../graphviz-loader';
import { VERSION } from '../version';

export function installGlobal(): ForgevizGlobal {
  const g = globalThis as { __forgeviz__?: ForgevizGlobal };
  const existing = g.__forgeviz__ ?? {};
  g.__forgeviz__ = {
    ...existing,
    version: VERSION,
    loadGraphviz: (): Promise<GraphvizLike> =>
      import(/* webpackChunkName: "forgeviz-graphviz" */ '@hpcc-js/wasm-graphviz').then(m => m.Graphviz.load())
  };
  return g.__forgeviz__;
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'forgeviz:plugin',
  description: 'Provides Graphviz (WASM) to forgeviz autograd graph views.',
  autoStart: true,
  activate: (_app: JupyterFrontEnd) => {
    installGlobal();
  }
};

export default plugin;
