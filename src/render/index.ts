export { createGraphView, nodeAriaLabel } from './graphview';
export type { GraphView, GraphViewOptions } from './graphview';
export { parseLayout, splitLabel } from './layout';
export type { Layout } from './layout';
export { formatNumber, formatValues, wireNumber } from './format';
