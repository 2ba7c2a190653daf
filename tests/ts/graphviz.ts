/** The real Graphviz WASM, loaded once per test file. */
import { Graphviz } from '@hpcc-js/wasm-graphviz';

let gv: Promise<Graphviz> | null = null;

export async function realLayout(dot: string): Promise<string> {
  gv ??= Graphviz.load();
  return (await gv).layout(dot, 'json', 'dot');
}
