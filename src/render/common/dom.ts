/** Tiny DOM helpers: the renderer uses plain DOM and SVG, nothing else. */

export const SVG_NS = 'http://www.w3.org/2000/svg';

type Attrs = Record<string, string | number | boolean | null | undefined>;
type Child = Node | string | null | undefined | false;

function applyAttrs(el: Element, attrs?: Attrs): void {
  if (!attrs) {
    return;
  }
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) {
      continue;
    }
    el.setAttribute(k, v === true ? '' : String(v));
  }
}

function append(el: Element, children: Child[]): void {
  for (const c of children) {
    if (c === null || c === undefined || c === false) {
      continue;
    }
    el.appendChild(typeof c === 'string' ? el.ownerDocument.createTextNode(c) : c);
  }
}

/** Create an HTML element. */
export function h<K extends keyof HTMLElementTagNameMap>(
  doc: Document,
  tag: K,
  attrs?: Attrs,
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const el = doc.createElement(tag);
  applyAttrs(el, attrs);
  append(el, children);
  return el;
}

/** Create an SVG element. */
export function s(doc: Document, tag: string, attrs?: Attrs, ...children: Child[]): SVGElement {
  const el = doc.createElementNS(SVG_NS, tag) as SVGElement;
  applyAttrs(el, attrs);
  append(el, children);
  return el;
}

/** Round to 2 decimals for compact SVG coordinates. */
export function r2(v: number): number {
  return Math.round(v * 100) / 100;
}
