/**
 * Entry of forgeviz/static/graphviz.js: the Graphviz WASM module as one ESM
 * file. The kernel sends it once per page when no JupyterLab extension
 * provides Graphviz.
 */
export { Graphviz } from '@hpcc-js/wasm-graphviz';
