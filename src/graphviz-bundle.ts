/**
 * Entry of forgeviz/static/graphviz.js: the Graphviz WASM module as one ESM
 * file, and forgeviz's layered layout for big views (it runs where Graphviz
 * runs: in the layout worker). The kernel sends it once per page when no
 * JupyterLab extension provides it.
 */
export { Graphviz } from '@hpcc-js/wasm-graphviz';
export { layeredLayout, packLayout } from './render/graph/layered';
