/** Self-contained SVG/PNG export and file downloads. */
import { SVG_NS } from './dom';

const STYLE_PROPS = [
  'fill',
  'fill-opacity',
  'stroke',
  'stroke-width',
  'stroke-dasharray',
  'stroke-opacity',
  'stroke-linejoin',
  'stroke-linecap',
  'opacity',
  'font-family',
  'font-size',
  'font-weight',
  'font-style',
  'text-anchor',
  'dominant-baseline',
  'paint-order',
  'visibility'
];

/** Of STYLE_PROPS, those SVG inherits: a child's value equal to its parent's is left out of the export. */
const INHERITED = new Set(STYLE_PROPS.filter(p => p !== 'opacity'));

/**
 * Resolve ``var(--name, fallback)`` (nested too) against an element's computed
 * style. Browsers already return resolved values; this covers the rest.
 */
export function resolveVars(value: string, lookup: (name: string) => string): string {
  let out = value;
  for (let guard = 0; guard < 16 && out.includes('var('); guard++) {
    const start = out.lastIndexOf('var(');
    let depth = 0;
    let end = -1;
    for (let i = start + 3; i < out.length; i++) {
      if (out[i] === '(') {
        depth++;
      } else if (out[i] === ')') {
        depth--;
        if (depth === 0) {
          end = i;
          break;
        }
      }
    }
    if (end < 0) {
      break;
    }
    const inner = out.slice(start + 4, end);
    const comma = inner.indexOf(',');
    const name = (comma < 0 ? inner : inner.slice(0, comma)).trim();
    const fallback = comma < 0 ? '' : inner.slice(comma + 1).trim();
    const v = lookup(name).trim();
    out = out.slice(0, start) + (v || fallback) + out.slice(end + 1);
  }
  return out;
}

/**
 * Elements alike (same tag, class, inline style and presentation attributes, under alike parents)
 * compute alike: one ``getComputedStyle`` serves them all, so a 10,000-box export takes one
 * read per kind of element rather than one per element.
 */
interface StyleMemo {
  /** A small id per distinct (parent id, element look). */
  ids: Map<string, number>;
  /** The inlined declarations of each id, as ``[property, value]``. */
  decl: Map<number, [string, string][]>;
  /** The computed values of each id (what its children inherit). */
  values: Map<number, Map<string, string>>;
}

function lookOf(el: Element, parent: number): string {
  let key = `${parent}>${el.tagName}.${el.getAttribute('class') ?? ''}|${el.getAttribute('style') ?? ''}`;
  for (const p of STYLE_PROPS) {
    const v = el.getAttribute(p);
    if (v !== null) {
      key += `|${p}=${v}`;
    }
  }
  return key;
}

function inlineStyles(src: Element, dst: Element, win: Window, root: Element, memo: StyleMemo, parent = -1): void {
  const look = lookOf(src, parent);
  let id = memo.ids.get(look);
  if (id === undefined) {
    id = memo.ids.size;
    memo.ids.set(look, id);
  }
  let decl = memo.decl.get(id);
  if (decl === undefined) {
    const cs = win.getComputedStyle(src);
    const rootCs = win.getComputedStyle(root);
    const lookup = (name: string) => cs.getPropertyValue(name) || rootCs.getPropertyValue(name);
    const inherited = memo.values.get(parent);
    const values = new Map<string, string>();
    const parts: [string, string][] = [];
    for (const p of STYLE_PROPS) {
      let v = cs.getPropertyValue(p);
      if (!v) {
        continue;
      }
      if (v.includes('var(')) {
        v = resolveVars(v, lookup);
      }
      if (v) {
        values.set(p, v);
        // what the parent's style already gives, the child inherits: a tenth of the bytes
        if (!(INHERITED.has(p) && inherited?.get(p) === v)) {
          parts.push([p, v]);
        }
      }
    }
    // a hidden element stays hidden (display is no STYLE_PROPS entry: most elements show)
    if (cs.getPropertyValue('display') === 'none') {
      parts.push(['display', 'none']);
    }
    decl = parts;
    memo.decl.set(id, decl);
    memo.values.set(id, values);
  }
  // as presentation attributes, not style="": readers that strip CSS (GitHub, nbviewer,
  // sanitisers) keep them; the computed values say all that the style said
  dst.removeAttribute('style');
  if (src.tagName.toLowerCase() !== 'title') {
    for (const [p, v] of decl) {
      dst.setAttribute(p, v);
    }
  }
  dst.removeAttribute('tabindex');
  const sc = src.children;
  const dc = dst.children;
  for (let i = 0; i < sc.length && i < dc.length; i++) {
    inlineStyles(sc[i], dc[i], win, root, memo, id);
  }
}

/** A CSS custom property of ``el`` resolved, with a fallback. */
export function cssVar(el: Element, name: string, fallback: string): string {
  const win = el.ownerDocument.defaultView;
  const v = win ? win.getComputedStyle(el).getPropertyValue(name).trim() : '';
  return v ? resolveVars(v, n => (win ? win.getComputedStyle(el).getPropertyValue(n) : '')) : fallback;
}

/**
 * Serialise ``content`` (an SVG group in graph coordinates) into a standalone SVG document with
 * its computed styles inlined as presentation attributes (``fill="…"``, ``font-size="…"``): no
 * ``<style>`` and no ``style=``, so the picture is the same where CSS is stripped (a saved
 * output on GitHub or nbviewer, a sanitised nbconvert page). A class-folded ``<style>`` was a
 * quarter smaller (S1's graph 8.4 KB, not 11.8 KB) but a saved output lost its colours and fonts
 * there; gzipped, the attributes are the smaller.
 */
export function standaloneSvg(
  content: SVGGElement,
  styleRoot: Element,
  width: number,
  height: number,
  title: string
): string {
  const doc = content.ownerDocument;
  const win = doc.defaultView as Window;
  const pad = 14;
  const W = Math.ceil(width + 2 * pad);
  const H = Math.ceil(height + 2 * pad);
  const svg = doc.createElementNS(SVG_NS, 'svg');
  svg.setAttribute('xmlns', SVG_NS);
  svg.setAttribute('version', '1.1');
  svg.setAttribute('width', String(W));
  svg.setAttribute('height', String(H));
  svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
  svg.setAttribute('role', 'img');
  const t = doc.createElementNS(SVG_NS, 'title');
  t.textContent = title;
  svg.appendChild(t);
  const bg = doc.createElementNS(SVG_NS, 'rect');
  bg.setAttribute('width', '100%');
  bg.setAttribute('height', '100%');
  bg.setAttribute('fill', cssVar(styleRoot, '--jp-layout-color0', '#ffffff'));
  svg.appendChild(bg);
  const clone = content.cloneNode(true) as SVGGElement;
  inlineStyles(content, clone, win, styleRoot, { ids: new Map(), decl: new Map(), values: new Map() });
  clone.setAttribute('transform', `translate(${pad},${pad})`);
  svg.appendChild(clone);
  const Ser = (win as unknown as { XMLSerializer?: typeof XMLSerializer }).XMLSerializer ?? XMLSerializer;
  const xml = new Ser().serializeToString(svg);
  // Some DOMs drop the explicit xmlns attribute on serialisation; make sure it is there.
  const withNs = /^<svg[^>]*\sxmlns=/.test(xml) ? xml : xml.replace(/^<svg/, `<svg xmlns="${SVG_NS}"`);
  return `<?xml version="1.0" encoding="UTF-8"?>\n${withNs}`;
}

/** Offer a blob as a file download. */
export function download(doc: Document, filename: string, data: Blob): void {
  const url = URL.createObjectURL(data);
  const a = doc.createElement('a');
  a.href = url;
  a.download = filename;
  a.style.display = 'none';
  doc.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

/**
 * Load a standalone SVG as an image, draw it with ``paint`` on a fresh ``width`` × ``height``
 * canvas, and settle with what ``paint`` returns (a value, or a promise of one).
 */
function rasterize<T>(
  doc: Document,
  svgText: string,
  width: number,
  height: number,
  paint: (ctx: CanvasRenderingContext2D, img: HTMLImageElement, canvas: HTMLCanvasElement) => T | Promise<T>
): Promise<T> {
  return new Promise((resolve, reject) => {
    const img = new (doc.defaultView as Window & typeof globalThis).Image();
    const url = URL.createObjectURL(new Blob([svgText], { type: 'image/svg+xml' }));
    img.onload = () => {
      try {
        const canvas = doc.createElement('canvas');
        canvas.width = width;
        canvas.height = height;
        const ctx = canvas.getContext('2d');
        if (!ctx) {
          throw new Error('no 2D canvas context');
        }
        resolve(paint(ctx, img, canvas));
      } catch (err) {
        reject(err);
      } finally {
        URL.revokeObjectURL(url);
      }
    };
    img.onerror = () => {
      URL.revokeObjectURL(url);
      reject(new Error('could not rasterise the SVG'));
    };
    img.src = url;
  });
}

/** The biggest canvas side and area browsers draw (Chromium: 32,767 px a side; keep well inside). */
const MAX_CANVAS_SIDE = 16_384;
const MAX_CANVAS_AREA = 120_000_000;

/**
 * Rasterise a standalone SVG string to a PNG blob at ``scale``, or at the largest scale a canvas
 * can hold (a 10,000-op chain is hundreds of thousands of points tall: its PNG is a thumbnail).
 */
export function svgToPng(doc: Document, svgText: string, width: number, height: number, scale = 2): Promise<Blob> {
  scale = Math.min(scale, MAX_CANVAS_SIDE / width, MAX_CANVAS_SIDE / height, Math.sqrt(MAX_CANVAS_AREA / (width * height)));
  return rasterize(doc, svgText, Math.ceil(width * scale), Math.ceil(height * scale), (ctx, img, canvas) => {
    ctx.scale(scale, scale);
    ctx.drawImage(img, 0, 0);
    return new Promise<Blob>((resolve, reject) =>
      canvas.toBlob(b => (b ? resolve(b) : reject(new Error('PNG encoding failed'))), 'image/png')
    );
  });
}

/** RGBA pixels, row-major, four bytes each. */
export interface RgbaPixels {
  data: Uint8ClampedArray;
  width: number;
  height: number;
}

/** Rasterise a standalone SVG to RGBA pixels on a white canvas, scaled to ``width`` × ``height``. */
export function svgToRgba(doc: Document, svgText: string, width: number, height: number): Promise<RgbaPixels> {
  return rasterize(doc, svgText, Math.max(1, Math.round(width)), Math.max(1, Math.round(height)), (ctx, img, canvas) => {
    ctx.fillStyle = '#ffffff';
    ctx.fillRect(0, 0, canvas.width, canvas.height);
    ctx.drawImage(img, 0, 0, canvas.width, canvas.height);
    const data = ctx.getImageData(0, 0, canvas.width, canvas.height);
    return { data: data.data, width: canvas.width, height: canvas.height };
  });
}
