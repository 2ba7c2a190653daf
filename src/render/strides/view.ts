/**
 * The stride/view diagram: each tensor's logical grid above the storage strip it
 * reads, with the address mapping shown on hover and focus.
 * Pure DOM/SVG; imports nothing from Jupyter or anywidget.
 */
import type { Overlap, StorageStrip, StrideLayout, TensorLayout, ValueWindow, ViewVerdict } from '../../model/wire';
import { h, r2, s } from '../common/dom';
import { download, standaloneSvg, svgToPng } from '../common/export';
import {
  addressFormula,
  Box,
  boxIndices,
  boxOffset,
  boxToInclude,
  gridGeometry,
  indexText,
  initialBox,
  pageBox,
  parseShape,
  storageIndex,
  stripDrawCount,
  stripGeometry,
  StripGeom,
  stripSpan,
  stripWindowFor,
  toStripIndex,
  tupleText
} from './layout';

export interface StridesViewOptions {
  requestValues(tensor: number, start: number[], size: number[]): Promise<ValueWindow>;
  requestStorage(strip: number, start: number, count: number): Promise<{ start: number; values: string[] }>;
  tryOp(tensor: number, op: 'view' | 'reshape', shape: number[]): Promise<ViewVerdict>;
}

export interface StridesView {
  setLayout(layout: StrideLayout): void;
  setWarnings(warnings: string[]): void;
  exportSVG(): string;
  destroy(): void;
}

/** Okabe–Ito, and a dash pattern per tensor so colour is never the only cue. */
export const TENSOR_COLORS = ['#0072B2', '#D55E00', '#009E73', '#CC79A7', '#E69F00', '#56B4E9'];
export const TENSOR_DASHES = ['none', '6 3', '2 2', '8 3 2 3', '1 3', '12 4'];

const CH = 20; // logical cell height
const SCH = 24; // storage cell height
const PAD = 8;
const MAX_ROW_W = 920;
const STRIP_LEFT = 52;
const MAX_READERS = 12;
const MAX_CONNECTORS = 48;
const KNOWN_CAP = 16384;

interface TState {
  t: TensorLayout;
  order: number;
  color: string;
  dash: string;
  box: Box | null;
  values: string[] | null;
  token: number;
  loading: boolean;
  /** strip element → row-major positions in the window that read it */
  readers: Map<number, number[]>;
}

interface SState {
  s: StorageStrip;
  start: number;
  known: Map<number, string>;
  inflight: boolean;
  failed: number | null;
  geom: StripGeom | null;
}

interface Rect {
  x: number;
  y: number;
  w: number;
  h: number;
}

interface Group {
  strip: SState | null;
  tensors: TState[];
  section: HTMLElement;
  svg: SVGSVGElement;
  content: SVGGElement | null;
  overlay: SVGGElement | null;
  cards: HTMLElement;
  width: number;
  height: number;
  cellEls: Map<string, SVGGElement>;
  cellRects: Map<string, Rect>;
  stripEls: Map<number, SVGGElement>;
  stripRects: Map<number, Rect>;
}

type Hot = { kind: 'cell'; tensor: number; index: number[] } | { kind: 'storage'; strip: number; addr: number };

const key = (tensor: number, index: readonly number[]) => `${tensor}|${index.join(',')}`;
const dtypeName = (d: string) => d.replace(/^torch\./, '');
const plural = (n: number, w: string) => `${n.toLocaleString('en-US')} ${w}${n === 1 ? '' : 's'}`;

function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

export function bytesText(n: number): string {
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let u = -1;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return u < 0 ? plural(n, 'byte') : `${plural(n, 'byte')} (${Number(v.toPrecision(3))} ${units[u]})`;
}

function clip(text: string, maxChars: number): string {
  return text.length <= maxChars ? text : `${text.slice(0, Math.max(1, maxChars - 1))}…`;
}

/** ".view(-1)" */
export function verdictCall(v: ViewVerdict): string {
  return v.op === 'contiguous' ? '.contiguous()' : `.${v.op}(${v.shape.join(', ')})`;
}

/** "✓ works (view)", "copy (48 bytes)", "no-op", ... */
export function verdictSummary(v: ViewVerdict): string {
  if (!v.works) {
    return '✗ fails';
  }
  if (v.op === 'contiguous') {
    return v.copies ? `allocates ${bytesText(v.bytes)}` : 'no-op: already contiguous';
  }
  if (v.op === 'reshape') {
    return v.copies ? `copy (${bytesText(v.bytes)})` : 'view (no copy)';
  }
  return v.copies ? `✓ works, copies ${bytesText(v.bytes)}` : '✓ works';
}

/** A verdict as DOM: call, summary, reason and torch's own message. */
export function renderVerdict(doc: Document, v: ViewVerdict, tag: 'li' | 'div' = 'li', cls = 'fv-verdict'): HTMLElement {
  const kind = !v.works ? 'fails' : v.copies ? 'copies' : 'view';
  return h(
    doc,
    tag,
    { class: cls, 'data-op': v.op, 'data-works': String(v.works), 'data-copies': String(v.copies), 'data-kind': kind },
    h(doc, 'code', { class: 'fv-verdict-call' }, verdictCall(v)),
    ' ',
    h(doc, 'span', { class: 'fv-verdict-summary' }, verdictSummary(v)),
    v.works && v.result_stride ? h(doc, 'span', { class: 'fv-verdict-stride' }, ` → stride ${tupleText(v.result_stride)}`) : null,
    v.reason ? h(doc, 'div', { class: 'fv-verdict-reason' }, v.reason) : null,
    v.torch_message ? h(doc, 'pre', { class: 'fv-torch-msg' }, v.torch_message) : null
  );
}

/** One sentence about an overlap. */
export function overlapText(o: Overlap, name: (id: number) => string, numel: (id: number) => number): string {
  const a = name(o.a);
  const b = name(o.b);
  let txt: string;
  if (o.elements === 0) {
    txt = `${a} and ${b} share the storage but read disjoint elements`;
  } else if (o.elements === numel(o.a) && o.elements === numel(o.b)) {
    txt = `${a} and ${b} read the same ${plural(o.elements, 'element')}`;
  } else {
    txt = `${a} and ${b} both read ${plural(o.elements, 'element')}`;
  }
  return o.exact ? txt : `${txt} (by extent)`;
}

function contiguityBadge(t: TensorLayout): string {
  if (t.stride === null) {
    return t.layout;
  }
  const mf = t.memory_format;
  if (mf && mf !== 'contiguous' && mf !== 'none' && mf !== 'ambiguous') {
    return t.is_contiguous ? `contiguous · ${mf}` : mf;
  }
  return t.is_contiguous ? 'contiguous' : 'non-contiguous';
}

export function createStridesView(el: HTMLElement, opts: StridesViewOptions): StridesView {
  const doc = el.ownerDocument;
  el.classList.add('fv-root', 'fv-strides');
  el.setAttribute('data-fv-state', 'loading');
  el.setAttribute('data-fv-pending', '0');

  // ---- chrome -----------------------------------------------------------------------------
  const warningStrip = h(doc, 'div', { class: 'fv-warning', role: 'alert', hidden: true });
  const btn = (cls: string, label: string, title: string) =>
    h(doc, 'button', { type: 'button', class: `fv-btn ${cls}`, title, 'aria-label': title }, label);
  const unitsBtn = btn('fv-units', 'Units: elements', 'Show storage in elements or in bytes');
  unitsBtn.setAttribute('aria-pressed', 'false');
  const svgBtn = btn('fv-export-svg', 'SVG', 'Download the diagram as SVG');
  const pngBtn = btn('fv-export-png', 'PNG', 'Download the diagram as PNG');
  const readout = h(doc, 'div', { class: 'fv-readout', role: 'status', 'aria-live': 'polite', 'data-empty': 'true' });
  const toolbar = h(
    doc,
    'div',
    { class: 'fv-toolbar', role: 'toolbar', 'aria-label': 'Stride diagram tools' },
    h(doc, 'div', { class: 'fv-btn-group' }, unitsBtn),
    h(doc, 'div', { class: 'fv-btn-group' }, svgBtn, pngBtn),
    readout
  );
  const status = h(doc, 'div', { class: 'fv-status', role: 'status', hidden: true });
  const message = h(doc, 'div', { class: 'fv-message', hidden: true });
  const groupsEl = h(doc, 'div', { class: 'fv-sd-groups' });
  const transcript = h(doc, 'details', { class: 'fv-transcript' });
  el.replaceChildren(warningStrip, toolbar, status, message, groupsEl, transcript);
  setReadout(null);

  // ---- state ------------------------------------------------------------------------------
  let layout: StrideLayout | null = null;
  let maxWindow = 1024;
  let bytesMode = false;
  let groups: Group[] = [];
  const tensors = new Map<number, TState>();
  const strips = new Map<number, SState>();
  let hot: Hot | null = null;
  let pendingFocus: string | null = null;
  let pending = 0;
  let destroyed = false;
  let rendering = false;

  function setPending(delta: number) {
    pending += delta;
    el.setAttribute('data-fv-pending', String(pending));
  }
  function showStatus(text: string | null) {
    status.hidden = !text;
    status.textContent = text ?? '';
    status.setAttribute('data-kind', 'error');
  }
  function setReadout(text: string | null) {
    readout.textContent = text ?? 'Hover or focus a cell to see which storage element it reads.';
    readout.setAttribute('data-empty', text ? 'false' : 'true');
  }
  const nameOf = (id: number) => tensors.get(id)?.t.name ?? `tensor ${id}`;
  const stripOf = (ts: TState): SState | null => (ts.t.strip >= 0 && layout ? strips.get(layout.strips[ts.t.strip]?.id ?? -1) ?? null : null);
  const groupOfTensor = (id: number) => groups.find(g => g.tensors.some(ts => ts.t.id === id)) ?? null;
  const groupOfStrip = (id: number) => groups.find(g => g.strip?.s.id === id) ?? null;

  /** The strip index (or storage element, without a strip) of a logical index. */
  function addrOf(ts: TState, index: readonly number[]): number {
    const a = storageIndex(index, ts.t.stride ?? [], ts.t.storage_offset);
    const st = stripOf(ts);
    return st ? toStripIndex(a, ts.t.element_size, st.s.element_size) : a;
  }
  function spanOf(ts: TState, index: readonly number[]): [number, number] {
    const a = storageIndex(index, ts.t.stride ?? [], ts.t.storage_offset);
    const st = stripOf(ts);
    return st ? stripSpan(a, ts.t.element_size, st.s.element_size) : [a, a];
  }

  function computeReaders(ts: TState) {
    ts.readers = new Map();
    if (!ts.box || ts.t.stride === null || ts.t.numel === 0) {
      return;
    }
    boxIndices(ts.box.start, ts.box.size).forEach((idx, flat) => {
      const [a0, a1] = spanOf(ts, idx);
      for (let a = a0; a <= a1; a++) {
        const list = ts.readers.get(a);
        if (list) {
          list.push(flat);
        } else {
          ts.readers.set(a, [flat]);
        }
      }
    });
  }

  function valueAt(ts: TState, index: readonly number[]): string | null {
    if (!ts.box || !ts.values) {
      return null;
    }
    const off = boxOffset(ts.box.start, ts.box.size, index);
    return off >= 0 && off < ts.values.length ? ts.values[off] : null;
  }

  // ---- data fetching -------------------------------------------------------------------------
  function moveTensorBox(ts: TState, box: Box, focus: string | null, force = false) {
    const same = !force && ts.box && box.start.every((v, k) => v === ts.box!.start[k]) && box.size.every((v, k) => v === ts.box!.size[k]);
    if (same) {
      if (focus) {
        focusKey(focus);
      }
      return;
    }
    const g = groupOfTensor(ts.t.id);
    if (!ts.t.has_data) {
      ts.box = box;
      computeReaders(ts);
      pendingFocus = focus;
      if (g) {
        renderGroup(g);
      }
      return;
    }
    const token = ++ts.token;
    ts.loading = true;
    setPending(1);
    if (g) {
      renderPagers(g, ts);
    }
    opts
      .requestValues(ts.t.id, box.start, box.size)
      .then(win => {
        if (destroyed || token !== ts.token) {
          return;
        }
        ts.box = { start: win.start.slice(), size: win.size.slice() };
        ts.values = win.values;
        computeReaders(ts);
        showStatus(null);
        pendingFocus = focus;
      })
      .catch(err => {
        if (!destroyed && token === ts.token) {
          showStatus(`Could not fetch values of ${ts.t.name}: ${errorMessage(err)}`);
        }
      })
      .finally(() => {
        setPending(-1);
        if (destroyed || token !== ts.token) {
          return;
        }
        ts.loading = false;
        const gg = groupOfTensor(ts.t.id);
        if (gg) {
          renderGroup(gg);
        }
      });
  }

  function stripCount(st: SState): number {
    return stripDrawCount(st.s.length, st.s.element_size, bytesMode, maxWindow);
  }

  /** Fetch the strip values the current window lacks (one request in flight per strip). */
  function ensureStrip(st: SState) {
    if (!st.s.has_data || st.inflight || destroyed) {
      return;
    }
    const count = stripCount(st);
    const start = st.start;
    let missing = false;
    for (let a = start; a < start + count; a++) {
      if (!st.known.has(a)) {
        missing = true;
        break;
      }
    }
    if (!missing || st.failed === start) {
      return;
    }
    st.inflight = true;
    setPending(1);
    opts
      .requestStorage(st.s.id, start, Math.min(count, maxWindow))
      .then(reply => {
        if (destroyed) {
          return;
        }
        if (st.known.size > KNOWN_CAP) {
          st.known.clear();
        }
        reply.values.forEach((v, i) => st.known.set(reply.start + i, v));
        // never ask twice for elements the kernel did not send
        for (let a = start; a < start + count; a++) {
          if (!st.known.has(a)) {
            st.known.set(a, '');
          }
        }
        showStatus(null);
      })
      .catch(err => {
        st.failed = start;
        if (!destroyed) {
          showStatus(`Could not fetch storage ${st.s.id}: ${errorMessage(err)}`);
        }
      })
      .finally(() => {
        st.inflight = false;
        setPending(-1);
        if (destroyed) {
          return;
        }
        const g = groupOfStrip(st.s.id);
        if (g) {
          renderGroup(g);
        }
        if (st.start !== start) {
          ensureStrip(st);
        }
      });
  }

  function moveStrip(st: SState, start: number, focus: string | null = null) {
    const count = stripCount(st);
    const ns = Math.max(0, Math.min(start, st.s.length - count));
    if (ns === st.start) {
      if (focus) {
        focusKey(focus);
      }
      return;
    }
    st.start = ns;
    pendingFocus = focus;
    const g = groupOfStrip(st.s.id);
    if (g) {
      renderGroup(g);
    }
    ensureStrip(st);
  }

  /** Make sure strip element ``addr`` is drawn, moving the window when it is not. */
  function revealAddr(st: SState, addr: number, focus: string | null = null): boolean {
    const count = stripCount(st);
    if (addr >= st.start && addr < st.start + count) {
      return false;
    }
    const perRow = st.geom?.perRow ?? 16;
    moveStrip(st, stripWindowFor(addr, st.s.length, count, perRow), focus);
    return true;
  }

  // ---- drawing ------------------------------------------------------------------------------------
  function cellWidth(g: Group): number {
    let longest = 1;
    for (const ts of g.tensors) {
      for (const v of ts.values ?? []) {
        longest = Math.max(longest, v.length);
      }
    }
    if (g.strip) {
      const count = stripCount(g.strip);
      for (let a = g.strip.start; a < g.strip.start + count; a++) {
        longest = Math.max(longest, g.strip.known.get(a)?.length ?? 0);
      }
    }
    return Math.max(24, Math.min(54, Math.ceil(longest * 5.8 + 8)));
  }

  function text(x: number, y: number, content: string, cls: string, extra: Record<string, string | number> = {}) {
    return s(doc, 'text', { x: r2(x), y: r2(y), class: cls, ...extra }, content);
  }

  function swatch(ts: TState, x: number, y: number, w = 18): SVGElement {
    return s(doc, 'line', {
      class: 'fv-swatch',
      x1: x,
      y1: y,
      x2: x + w,
      y2: y,
      stroke: ts.color,
      'stroke-dasharray': ts.dash,
      'stroke-width': 3
    });
  }

  /** One tensor block: header + logical grid. Returns its size. */
  function drawTensor(g: Group, ts: TState, root: SVGGElement, ox: number, oy: number, cw: number): { w: number; h: number } {
    const t = ts.t;
    const blk = s(doc, 'g', {
      class: 'fv-sd-tensor',
      'data-tensor': t.id,
      transform: `translate(${r2(ox)},${r2(oy)})`
    }) as SVGGElement;
    root.appendChild(blk);
    // header
    const head = s(doc, 'g', { class: 'fv-t-head' });
    head.appendChild(swatch(ts, 0, 8));
    head.appendChild(text(24, 12, t.name, 'fv-t-name'));
    const badge = contiguityBadge(t);
    const bx = 24 + t.name.length * 7.3 + 8;
    const bw = badge.length * 5.6 + 10;
    const bg = s(doc, 'g', { class: 'fv-badge-c', 'data-contiguous': String(t.is_contiguous), transform: `translate(${r2(bx)},1)` });
    bg.append(s(doc, 'rect', { class: 'fv-badge-box', width: r2(bw), height: 14, rx: 7 }), text(bw / 2, 10.5, badge, 'fv-badge-text', { 'text-anchor': 'middle' }));
    head.appendChild(bg);
    const line2 =
      t.stride === null
        ? `shape ${tupleText(t.shape)} · layout ${t.layout} · no strides`
        : `shape ${tupleText(t.shape)} · stride ${tupleText(t.stride)} · offset ${t.storage_offset}`;
    const line3 = [
      dtypeName(t.dtype),
      `${t.element_size} B/element`,
      t.device,
      t.kind === 'numpy' ? 'numpy array' : null,
      t.has_data ? null : 'meta: no data'
    ]
      .filter(Boolean)
      .join(' · ');
    head.append(text(0, 29, line2, 'fv-t-line'), text(0, 44, line3, 'fv-t-line fv-t-sub'));
    blk.appendChild(head);
    let w = Math.max(bx + bw, line2.length * 6.5, line3.length * 6.5);
    let y = 56;

    if (t.stride === null) {
      const note = `layout ${t.layout}: ${t.panel ? t.panel.title : 'no strides'} (see the panel below)`;
      blk.appendChild(text(0, y + 10, note, 'fv-t-note'));
      return { w: Math.max(w, note.length * 6), h: y + 16 };
    }
    if (t.numel === 0 || t.shape.some(n => n === 0)) {
      const note = `no elements (shape ${tupleText(t.shape)})`;
      blk.appendChild(text(0, y + 10, note, 'fv-t-note fv-empty'));
      return { w: Math.max(w, note.length * 6), h: y + 16 };
    }
    const box = ts.box ?? initialBox(t.shape, maxWindow);
    const d = t.shape.length;
    const axes: string[] = [];
    if (d === 0) {
      axes.push('0-d tensor: one element');
    } else {
      axes.push(`dim ${d - 1} (size ${t.shape[d - 1]}) →${d >= 2 ? ' columns' : ''}`);
      if (d >= 2) {
        axes.push(`dim ${d - 2} (size ${t.shape[d - 2]}) ↓ rows`);
      }
      for (let k = d - 3, level = 1; k >= 0; k--, level++) {
        axes.push(`dim ${k} (size ${t.shape[k]}) ${level % 2 ? '→' : '↓'} tiles`);
      }
    }
    const axesText = axes.join(' · ');
    blk.appendChild(text(0, y + 9, axesText, 'fv-axis-label'));
    w = Math.max(w, axesText.length * 5.5);
    y += 16;
    const geom = gridGeometry(t.shape, box.start, box.size, cw, CH);
    const grid = s(doc, 'g', { class: 'fv-grid', 'data-tensor': t.id, transform: `translate(0,${y})` });
    for (const b of geom.blocks) {
      grid.appendChild(s(doc, 'rect', { class: 'fv-block', x: r2(b.x), y: r2(b.y), width: r2(b.w), height: r2(b.h), rx: 4, 'data-dim': b.dim }));
    }
    for (const tile of geom.tiles) {
      grid.appendChild(s(doc, 'rect', { class: 'fv-tile', x: r2(tile.x), y: r2(tile.y), width: r2(tile.w), height: r2(tile.h), rx: 3, 'data-lead': tile.lead.join(',') }));
    }
    for (const m of geom.marks) {
      grid.appendChild(text(m.x, m.y, m.text, m.cls, m.anchor ? { 'text-anchor': m.anchor } : {}));
    }
    const maxChars = Math.max(1, Math.floor((cw - 4) / 5.6));
    for (const c of geom.cells) {
      const addr = addrOf(ts, c.index);
      const v = ts.values && c.flat < ts.values.length ? ts.values[c.flat] : null;
      const idx = c.index.join(',');
      const label = `${indexText(t.name, c.index)}${v !== null ? ` = ${v}` : ''} → storage[${addr}]`;
      const cell = s(doc, 'g', {
        class: 'fv-cell',
        'data-tensor': t.id,
        'data-index': idx,
        'data-addr': addr,
        transform: `translate(${r2(c.x)},${r2(c.y)})`,
        tabindex: 0,
        role: 'img',
        'aria-label': label
      }) as SVGGElement;
      cell.append(
        s(doc, 'title', {}, label),
        s(doc, 'rect', { class: 'fv-cell-box', x: 0.5, y: 0.5, width: cw - 1, height: CH - 1, fill: ts.color })
      );
      if (v !== null) {
        cell.appendChild(text(cw / 2, CH / 2 + 3.3, clip(v, maxChars), 'fv-cell-text', { 'text-anchor': 'middle' }));
      }
      grid.appendChild(cell);
      const k = key(t.id, c.index);
      g.cellEls.set(k, cell);
      g.cellRects.set(k, { x: ox + c.x, y: oy + y + c.y, w: cw, h: CH });
    }
    // frame in the tensor's colour and dash pattern: the non-colour cue
    grid.appendChild(
      s(doc, 'rect', {
        class: 'fv-t-frame',
        x: -3,
        y: -3,
        width: r2(geom.width + 6),
        height: r2(geom.height + 6),
        rx: 4,
        stroke: ts.color,
        'stroke-dasharray': ts.dash
      })
    );
    blk.appendChild(grid);
    if (!t.has_data) {
      blk.appendChild(text(0, y + geom.height + 16, 'meta: no data (the layout is real, the values do not exist)', 'fv-t-note'));
      y += 16;
    }
    return { w: Math.max(w, geom.width + 6), h: y + geom.height + 6 };
  }

  function drawStrip(g: Group, st: SState, root: SVGGElement, oy: number, cw: number): { w: number; h: number } {
    const sp = st.s;
    const layer = s(doc, 'g', { class: 'fv-strip', 'data-strip': sp.id, transform: `translate(0,${r2(oy)})` }) as SVGGElement;
    root.appendChild(layer);
    const count = stripCount(st);
    const geom = stripGeometry(st.start, count, cw, sp.element_size, bytesMode);
    st.geom = geom;
    const readers = g.tensors.filter(ts => ts.t.stride !== null);
    const lanes = readers.length;
    const cellsW = geom.perRow * geom.ew;
    let w = STRIP_LEFT + cellsW;
    // label
    const head = `storage ${sp.id} · ${dtypeName(sp.dtype)} · ${plural(sp.length, 'element')} × ${sp.element_size} B = ${bytesText(sp.nbytes)} · ${sp.device}${sp.has_data ? (sp.data_ptr ? ` · data_ptr ${sp.data_ptr}` : '') : ' · meta: no data'}`;
    layer.appendChild(text(0, 12, head, 'fv-strip-label'));
    w = Math.max(w, head.length * 6.8);
    let x = 0;
    const by = s(doc, 'g', { class: 'fv-strip-readers' });
    by.appendChild(text(0, 29, 'read by:', 'fv-strip-sub'));
    x = 50;
    for (const ts of g.tensors) {
      by.append(swatch(ts, x, 25, 16), text(x + 20, 29, ts.t.name, 'fv-strip-reader', { 'data-tensor': ts.t.id }));
      x += 28 + ts.t.name.length * 6.6;
    }
    layer.appendChild(by);
    if (sp.copy) {
      const label = 'copy: own storage';
      const cx = x + 8;
      const cg = s(doc, 'g', { class: 'fv-copy', transform: `translate(${r2(cx)},17)` });
      cg.append(s(doc, 'rect', { class: 'fv-copy-box', width: label.length * 6 + 12, height: 16, rx: 3 }), text(6, 11.5, label, 'fv-copy-text'));
      layer.appendChild(cg);
      x = cx + label.length * 6 + 12;
    }
    w = Math.max(w, x);
    let y = 40;
    // overview of the whole storage when only part of it is drawn
    if (sp.length > count) {
      const ow = Math.max(200, cellsW);
      const sx = (a: number) => STRIP_LEFT + (a / sp.length) * ow;
      const ov = s(doc, 'g', { class: 'fv-overview', 'data-strip': sp.id });
      ov.append(
        text(0, y + 8, 'all', 'fv-row-label'),
        s(doc, 'rect', { class: 'fv-ov-bar', x: STRIP_LEFT, y, width: r2(ow), height: 8, rx: 2 }),
        s(doc, 'rect', { class: 'fv-ov-win', x: r2(sx(st.start)), y: y - 2, width: r2(Math.max(2, (count / sp.length) * ow)), height: 12, rx: 2 })
      );
      readers.forEach((ts, i) => {
        const e = ts.t.extent;
        if (!e) {
          return;
        }
        const lo = toStripIndex(e[0], ts.t.element_size, sp.element_size);
        const hi = stripSpan(e[1], ts.t.element_size, sp.element_size)[1];
        ov.appendChild(
          s(doc, 'line', {
            class: 'fv-ov-extent',
            x1: r2(sx(lo)),
            x2: r2(Math.max(sx(lo) + 2, sx(hi + 1))),
            y1: y + 13 + i * 4,
            y2: y + 13 + i * 4,
            stroke: ts.color,
            'stroke-dasharray': ts.dash,
            'data-tensor': ts.t.id
          })
        );
      });
      const note = `showing elements ${st.start}–${st.start + count - 1} of ${sp.length}`;
      ov.appendChild(text(STRIP_LEFT, y + 24 + lanes * 4, note, 'fv-strip-sub'));
      layer.appendChild(ov);
      y += 32 + lanes * 4;
    }
    // room above the cells for the stride arcs
    y += 10 + 9 * Math.min(4, Math.max(1, ...readers.map(ts => ts.t.shape.length)));
    const rowPitch = SCH + 4 + lanes * 4 + 6;
    const cells = s(doc, 'g', { class: 'fv-strip-cells' });
    const maxChars = Math.max(1, Math.floor((geom.ew - 4) / 5.6));
    for (let r = 0; r < geom.rows; r++) {
      const first = st.start + r * geom.perRow;
      const ry = y + r * rowPitch;
      cells.appendChild(text(STRIP_LEFT - 5, ry + SCH / 2 + 3.5, bytesMode ? `byte ${first * sp.element_size}` : `[${first}]`, 'fv-row-label', { 'text-anchor': 'end' }));
    }
    for (let i = 0; i < count; i++) {
      const a = st.start + i;
      const r = Math.floor(i / geom.perRow);
      const cx = STRIP_LEFT + (i % geom.perRow) * geom.ew;
      const cy = y + r * rowPitch;
      const v = sp.has_data ? st.known.get(a) : undefined;
      const readBy = g.tensors.filter(ts => ts.readers.has(a)).map(ts => ts.t.name);
      const label = `storage[${a}]${v !== undefined && v !== '' ? ` = ${v}` : ''}${bytesMode ? `, bytes ${a * sp.element_size}–${(a + 1) * sp.element_size - 1}` : ''}${readBy.length ? `, read by ${readBy.join(', ')}` : ''}`;
      const cell = s(doc, 'g', {
        class: 'fv-storage-cell',
        'data-strip': sp.id,
        'data-addr': a,
        transform: `translate(${r2(cx)},${r2(cy)})`,
        tabindex: 0,
        role: 'img',
        'aria-label': label
      }) as SVGGElement;
      cell.append(s(doc, 'title', {}, label), s(doc, 'rect', { class: 'fv-sc-box', x: 0.5, y: 0.5, width: geom.ew - 1, height: SCH - 1 }));
      if (bytesMode) {
        const bw = geom.ew / sp.element_size;
        for (let b = 1; b < sp.element_size; b++) {
          cell.appendChild(s(doc, 'line', { class: 'fv-byte-div', x1: r2(b * bw), x2: r2(b * bw), y1: 9, y2: SCH - 1 }));
        }
        cell.appendChild(text(2, 8, String(a * sp.element_size), 'fv-addr-num'));
      } else {
        cell.appendChild(text(2, 8, String(a), 'fv-addr-num'));
      }
      if (v) {
        cell.appendChild(text(geom.ew / 2, SCH - 5, clip(v, maxChars), 'fv-cell-text', { 'text-anchor': 'middle' }));
      }
      cells.appendChild(cell);
      g.stripEls.set(a, cell);
      g.stripRects.set(a, { x: cx, y: oy + cy, w: geom.ew, h: SCH });
    }
    // extents (faint, dashed) and the elements each tensor's window reads (solid ticks)
    readers.forEach((ts, li) => {
      const e = ts.t.extent;
      const lane = s(doc, 'g', { class: 'fv-extent', 'data-tensor': ts.t.id });
      const ly = SCH + 5 + li * 4;
      if (e) {
        const lo = Math.max(st.start, toStripIndex(e[0], ts.t.element_size, sp.element_size));
        const hi = Math.min(st.start + count - 1, stripSpan(e[1], ts.t.element_size, sp.element_size)[1]);
        for (let a = lo; a <= hi; ) {
          const i = a - st.start;
          const r = Math.floor(i / geom.perRow);
          const rowEnd = Math.min(hi, st.start + (r + 1) * geom.perRow - 1);
          const x1 = STRIP_LEFT + (i % geom.perRow) * geom.ew + 1;
          const x2 = STRIP_LEFT + ((rowEnd - st.start) % geom.perRow) * geom.ew + geom.ew - 1;
          lane.appendChild(
            s(doc, 'line', { class: 'fv-extent-bar', x1: r2(x1), x2: r2(x2), y1: r2(y + r * rowPitch + ly), y2: r2(y + r * rowPitch + ly), stroke: ts.color, 'stroke-dasharray': ts.dash })
          );
          a = rowEnd + 1;
        }
      }
      for (const a of ts.readers.keys()) {
        const i = a - st.start;
        if (i < 0 || i >= count) {
          continue;
        }
        const r = Math.floor(i / geom.perRow);
        lane.appendChild(
          s(doc, 'rect', {
            class: 'fv-read-tick',
            x: r2(STRIP_LEFT + (i % geom.perRow) * geom.ew + 2),
            y: r2(y + r * rowPitch + ly - 1.5),
            width: r2(Math.max(1, geom.ew - 4)),
            height: 3,
            fill: ts.color
          })
        );
      }
      cells.appendChild(lane);
    });
    layer.appendChild(cells);
    y += geom.rows * rowPitch;
    // overlaps
    const ids = new Set(g.tensors.map(ts => ts.t.id));
    for (const o of layout?.overlaps ?? []) {
      if (!ids.has(o.a) && !ids.has(o.b)) {
        continue;
      }
      const line = overlapText(o, nameOf, id => tensors.get(id)?.t.numel ?? -1);
      layer.appendChild(text(0, y + 12, line, 'fv-overlap', { 'data-a': o.a, 'data-b': o.b, 'data-elements': o.elements }));
      w = Math.max(w, line.length * 6.2);
      y += 16;
    }
    return { w, h: y + 4 };
  }

  function renderGroup(g: Group) {
    const active = doc.activeElement;
    let focusWanted = pendingFocus;
    pendingFocus = null;
    if (!focusWanted && active && g.svg.contains(active)) {
      focusWanted = keyOfEl(active);
    }
    g.cellEls.clear();
    g.cellRects.clear();
    g.stripEls.clear();
    g.stripRects.clear();
    const cw = cellWidth(g);
    const content = s(doc, 'g', { class: 'fv-sd-content', transform: `translate(${PAD},${PAD})` }) as SVGGElement;
    const tensorsLayer = s(doc, 'g', { class: 'fv-sd-tensors' }) as SVGGElement;
    content.appendChild(tensorsLayer);
    let x = 0;
    let y = 0;
    let rowH = 0;
    let width = 0;
    for (const ts of g.tensors) {
      // measure by drawing, then move to the next row when it does not fit
      const size = drawTensor(g, ts, tensorsLayer, x, y, cw);
      if (x > 0 && x + size.w > MAX_ROW_W) {
        tensorsLayer.lastChild?.remove();
        for (const k of [...g.cellEls.keys()]) {
          if (k.startsWith(`${ts.t.id}|`)) {
            g.cellEls.delete(k);
            g.cellRects.delete(k);
          }
        }
        x = 0;
        y += rowH + 22;
        rowH = 0;
        drawTensor(g, ts, tensorsLayer, x, y, cw);
      }
      x += size.w + 32;
      rowH = Math.max(rowH, size.h);
      width = Math.max(width, x - 32);
    }
    let height = y + rowH;
    if (g.strip) {
      const size = drawStrip(g, g.strip, content, height + 22, cw);
      width = Math.max(width, size.w);
      height += 22 + size.h;
    }
    const overlay = s(doc, 'g', { class: 'fv-sd-overlay', 'pointer-events': 'none', 'aria-hidden': 'true' }) as SVGGElement;
    content.appendChild(overlay);
    g.width = Math.ceil(width);
    g.height = Math.ceil(height);
    g.svg.setAttribute('width', String(g.width + 2 * PAD));
    g.svg.setAttribute('height', String(g.height + 2 * PAD));
    g.svg.setAttribute('viewBox', `0 0 ${g.width + 2 * PAD} ${g.height + 2 * PAD}`);
    rendering = true;
    try {
      g.svg.replaceChildren(content);
    } finally {
      rendering = false;
    }
    g.content = content;
    g.overlay = overlay;
    for (const ts of g.tensors) {
      renderPagers(g, ts);
    }
    renderStripPager(g);
    applyHot();
    if (focusWanted) {
      focusKey(focusWanted);
    }
  }

  // ---- HTML controls: pagers, facts, verdicts, try ---------------------------------------------
  function renderPagers(g: Group, ts: TState) {
    const holder = g.cards.querySelector(`.fv-sd-card[data-tensor="${ts.t.id}"] .fv-pagers`);
    if (!holder) {
      return;
    }
    holder.replaceChildren();
    holder.toggleAttribute('data-loading', ts.loading);
    const box = ts.box;
    if (!box || ts.t.stride === null) {
      return;
    }
    ts.t.shape.forEach((n, k) => {
      if (box.size[k] >= n) {
        return;
      }
      const lo = box.start[k];
      const hi = lo + box.size[k] - 1;
      const prev = h(doc, 'button', { type: 'button', class: 'fv-btn fv-page-prev', 'data-tensor': ts.t.id, 'data-dim': k, 'aria-label': `${ts.t.name}: previous indices of dim ${k}`, disabled: lo === 0 }, '‹');
      const next = h(doc, 'button', { type: 'button', class: 'fv-btn fv-page-next', 'data-tensor': ts.t.id, 'data-dim': k, 'aria-label': `${ts.t.name}: next indices of dim ${k}`, disabled: hi >= n - 1 }, '›');
      holder.appendChild(
        h(doc, 'div', { class: 'fv-pager', 'data-dim': k }, h(doc, 'span', { class: 'fv-btn-group' }, prev, next), h(doc, 'span', { class: 'fv-page-range' }, ` dim ${k}: ${lo}–${hi} of ${n}`))
      );
    });
  }

  function renderStripPager(g: Group) {
    const holder = g.section.querySelector('.fv-strip-pager');
    const st = g.strip;
    if (!holder) {
      return;
    }
    holder.replaceChildren();
    if (!st || st.s.length <= stripCount(st)) {
      return;
    }
    const count = stripCount(st);
    const id = st.s.id;
    holder.append(
      h(
        doc,
        'span',
        { class: 'fv-btn-group' },
        h(doc, 'button', { type: 'button', class: 'fv-btn fv-strip-prev', 'data-strip': id, 'aria-label': `storage ${id}: previous elements`, disabled: st.start === 0 }, '‹'),
        h(doc, 'button', { type: 'button', class: 'fv-btn fv-strip-next', 'data-strip': id, 'aria-label': `storage ${id}: next elements`, disabled: st.start + count >= st.s.length }, '›')
      ),
      h(doc, 'span', { class: 'fv-page-range' }, ` storage ${id}: elements ${st.start}–${st.start + count - 1} of ${st.s.length}`)
    );
  }

  function renderCard(ts: TState): HTMLElement {
    const t = ts.t;
    const card = h(doc, 'div', { class: 'fv-sd-card', 'data-tensor': t.id, style: `--fv-c:${ts.color}` });
    card.appendChild(
      h(doc, 'h4', { class: 'fv-card-title' }, h(doc, 'span', { class: 'fv-card-swatch', 'aria-hidden': 'true', 'data-dash': ts.order % TENSOR_DASHES.length }), h(doc, 'code', {}, t.name), ` ${tupleText(t.shape)} ${dtypeName(t.dtype)}`)
    );
    card.appendChild(h(doc, 'div', { class: 'fv-pagers' }));
    if (t.stride === null) {
      card.appendChild(renderPanel(t));
    }
    if (t.facts.length) {
      card.appendChild(
        h(
          doc,
          'ul',
          { class: 'fv-facts' },
          ...t.facts.map(f =>
            h(
              doc,
              'li',
              { class: 'fv-fact', 'data-key': f.key, title: f.reason },
              h(doc, 'span', { class: 'fv-fact-label' }, `${f.label}: `),
              h(doc, 'span', { class: 'fv-fact-value' }, f.value),
              f.reason ? h(doc, 'div', { class: 'fv-fact-reason' }, f.reason) : null
            )
          )
        )
      );
    }
    if (t.verdicts.length) {
      card.appendChild(h(doc, 'ul', { class: 'fv-verdicts' }, ...t.verdicts.map(v => renderVerdict(doc, v))));
    }
    if (t.stride !== null) {
      const input = h(doc, 'input', { type: 'text', class: 'fv-try-shape', placeholder: 'e.g. 2, 6', 'aria-label': `new shape for ${t.name}`, spellcheck: 'false' });
      const out = h(doc, 'div', { class: 'fv-try-out', 'aria-live': 'polite' });
      const go = (op: 'view' | 'reshape') => {
        const parsed = parseShape(input.value);
        if ('error' in parsed) {
          out.replaceChildren(h(doc, 'div', { class: 'fv-try-error', role: 'alert' }, parsed.error));
          return;
        }
        out.replaceChildren(h(doc, 'div', { class: 'fv-loading' }, `asking torch: ${t.name}.${op}(${parsed.shape.join(', ')})…`));
        setPending(1);
        opts
          .tryOp(t.id, op, parsed.shape)
          .then(v => {
            if (!destroyed) {
              out.replaceChildren(renderVerdict(doc, v, 'div', 'fv-verdict fv-try-result'));
            }
          })
          .catch(err => {
            if (!destroyed) {
              out.replaceChildren(h(doc, 'div', { class: 'fv-try-error', role: 'alert' }, `${t.name}.${op}: ${errorMessage(err)}`));
            }
          })
          .finally(() => setPending(-1));
      };
      const viewBtn = h(doc, 'button', { type: 'submit', class: 'fv-btn fv-try-view' }, 'view');
      const reshapeBtn = h(doc, 'button', { type: 'button', class: 'fv-btn fv-try-reshape' }, 'reshape');
      const form = h(doc, 'form', { class: 'fv-try', 'data-tensor': t.id }, h(doc, 'label', {}, `try ${t.name}.`), input, h(doc, 'span', { class: 'fv-btn-group' }, viewBtn, reshapeBtn), out);
      form.addEventListener('submit', e => {
        e.preventDefault();
        go('view');
      });
      reshapeBtn.addEventListener('click', () => go('reshape'));
      card.appendChild(form);
    }
    return card;
  }

  function renderPanel(t: TensorLayout): HTMLElement {
    const p = t.panel;
    if (!p) {
      return h(doc, 'div', { class: 'fv-panel' }, h(doc, 'p', {}, `layout ${t.layout}: no strides, nothing to draw`));
    }
    const rows = p.parts.map(part =>
      h(
        doc,
        'tr',
        { 'data-part': part.name },
        h(doc, 'td', {}, h(doc, 'code', {}, part.name)),
        h(doc, 'td', {}, tupleText(part.shape)),
        h(doc, 'td', {}, dtypeName(part.dtype)),
        h(doc, 'td', {}, part.note),
        h(doc, 'td', { class: 'fv-part-values' }, part.values ? part.values.join(', ') : '')
      )
    );
    return h(
      doc,
      'div',
      { class: 'fv-panel', 'data-layout': p.layout },
      h(doc, 'h5', { class: 'fv-panel-title' }, p.title),
      h(doc, 'p', { class: 'fv-panel-explanation' }, p.explanation),
      p.parts.length
        ? h(
            doc,
            'table',
            { class: 'fv-panel-parts' },
            h(doc, 'thead', {}, h(doc, 'tr', {}, ...['name', 'shape', 'dtype', 'note', 'values'].map(c => h(doc, 'th', { scope: 'col' }, c)))),
            h(doc, 'tbody', {}, ...rows)
          )
        : null
    );
  }

  function renderTranscript() {
    transcript.replaceChildren(h(doc, 'summary', {}, 'Text description'));
    if (!layout) {
      return;
    }
    if (layout.message) {
      transcript.appendChild(h(doc, 'p', {}, layout.message));
    }
    const tl = h(doc, 'ul', { class: 'fv-transcript-tensors' });
    for (const ts of tensors.values()) {
      const t = ts.t;
      let line: string;
      if (t.stride === null) {
        line = `${t.name}: shape ${tupleText(t.shape)}, ${dtypeName(t.dtype)}, layout ${t.layout} has no strides${t.panel ? ` (${t.panel.title}: ${t.panel.explanation})` : ''}.`;
      } else {
        const st = stripOf(ts);
        const ext = t.extent ? `elements ${t.extent[0]} to ${t.extent[1]}` : 'no elements';
        line =
          `${t.name}: shape ${tupleText(t.shape)}, stride ${tupleText(t.stride)}, storage offset ${t.storage_offset}, ` +
          `${dtypeName(t.dtype)} (${t.element_size} bytes per element) on ${t.device}, ${t.is_contiguous ? 'contiguous' : 'not contiguous'}` +
          `${st ? `; reads storage ${st.s.id}, ${ext}` : ''}${t.has_data ? '' : '; meta tensor, no data'}.`;
      }
      tl.appendChild(h(doc, 'li', { 'data-tensor': t.id }, line));
    }
    const sl = h(doc, 'ul', { class: 'fv-transcript-strips' });
    for (const st of strips.values()) {
      const sp = st.s;
      const names = sp.tensors.map(nameOf).join(', ');
      sl.appendChild(
        h(doc, 'li', { 'data-strip': sp.id }, `storage ${sp.id}: ${plural(sp.length, 'element')} of ${dtypeName(sp.dtype)} (${bytesText(sp.nbytes)}) on ${sp.device}, read by ${names || 'no tensor'}${sp.copy ? '; a copy with its own storage' : ''}.`)
      );
    }
    const ol = h(doc, 'ul', { class: 'fv-transcript-overlaps' });
    for (const o of layout.overlaps) {
      ol.appendChild(h(doc, 'li', {}, `${overlapText(o, nameOf, id => tensors.get(id)?.t.numel ?? -1)}.`));
    }
    transcript.append(h(doc, 'h5', {}, 'Tensors'), tl, h(doc, 'h5', {}, 'Storages'), sl);
    if (layout.overlaps.length) {
      transcript.append(h(doc, 'h5', {}, 'Sharing'), ol);
    }
  }

  // ---- hover / focus mapping ---------------------------------------------------------------------
  function keyOfEl(e: Element): string | null {
    const c = e.closest('.fv-cell, .fv-storage-cell');
    if (!c) {
      return null;
    }
    return c.classList.contains('fv-cell') ? `c:${c.getAttribute('data-tensor')}|${c.getAttribute('data-index')}` : `s:${c.getAttribute('data-strip')}|${c.getAttribute('data-addr')}`;
  }

  function elOfKey(k: string): SVGGElement | null {
    const [kind, rest] = [k.slice(0, 2), k.slice(2)];
    const [a, b] = rest.split('|');
    if (kind === 'c:') {
      return groupOfTensor(Number(a))?.cellEls.get(rest) ?? null;
    }
    return groupOfStrip(Number(a))?.stripEls.get(Number(b)) ?? null;
  }

  function focusKey(k: string) {
    const target = elOfKey(k);
    if (target && doc.activeElement !== target) {
      (target as unknown as HTMLElement).focus?.();
    }
  }

  function hotFromKey(k: string): Hot | null {
    const [a, b] = k.slice(2).split('|');
    if (k.startsWith('c:')) {
      return { kind: 'cell', tensor: Number(a), index: b === '' ? [] : b.split(',').map(Number) };
    }
    if (k.startsWith('s:')) {
      return { kind: 'storage', strip: Number(a), addr: Number(b) };
    }
    return null;
  }

  const hotKey = (x: Hot | null) => (!x ? '' : x.kind === 'cell' ? `c:${key(x.tensor, x.index)}` : `s:${x.strip}|${x.addr}`);

  function setHot(next: Hot | null) {
    if (hotKey(next) === hotKey(hot)) {
      return;
    }
    hot = next;
    if (next && next.kind === 'cell') {
      const ts = tensors.get(next.tensor);
      const st = ts ? stripOf(ts) : null;
      if (ts && st && ts.t.stride !== null && revealAddr(st, spanOf(ts, next.index)[0])) {
        return; // redrawn: renderGroup applied the highlight
      }
    }
    applyHot();
  }

  function clearHotMarks() {
    for (const e of Array.from(el.querySelectorAll('.fv-hot'))) {
      e.classList.remove('fv-hot');
    }
    for (const g of groups) {
      g.overlay?.replaceChildren();
    }
  }

  function connector(a: Rect, b: Rect, color: string): SVGElement {
    const x1 = a.x + a.w / 2;
    const y1 = a.y + a.h;
    const x2 = b.x + b.w / 2;
    const y2 = b.y;
    const my = (y1 + y2) / 2;
    return s(doc, 'path', { class: 'fv-connector', d: `M${r2(x1)},${r2(y1)} C${r2(x1)},${r2(my)} ${r2(x2)},${r2(my)} ${r2(x2)},${r2(y2)}`, stroke: color });
  }

  function applyHot() {
    clearHotMarks();
    const cur = hot;
    if (!cur) {
      setReadout(null);
      return;
    }
    if (cur.kind === 'cell') {
      const ts = tensors.get(cur.tensor);
      const g = groupOfTensor(cur.tensor);
      if (!ts || !g || ts.t.stride === null) {
        setReadout(null);
        return;
      }
      const t = ts.t;
      const strides = ts.t.stride;
      const k = key(t.id, cur.index);
      g.cellEls.get(k)?.classList.add('fv-hot');
      const st = stripOf(ts);
      const [a0, a1] = spanOf(ts, cur.index);
      const rect = g.cellRects.get(k);
      for (let a = a0; a <= a1; a++) {
        g.stripEls.get(a)?.classList.add('fv-hot');
      }
      const target = g.stripRects.get(a0);
      if (rect && target && g.overlay) {
        g.overlay.appendChild(connector(rect, target, ts.color));
      }
      const raw = storageIndex(cur.index, strides, t.storage_offset);
      let value = st?.s.has_data ? st.known.get(a0) : undefined;
      if (!value) {
        value = valueAt(ts, cur.index) ?? undefined;
      }
      const conv = st && st.s.element_size !== t.element_size ? ` = ${raw}; ×${t.element_size}/${st.s.element_size} bytes → ${a0}` : '';
      const where = st ? `storage[${a0}]` : `storage element ${raw} (no strip drawn)`;
      const shown = t.has_data ? (value !== undefined && value !== '' ? ` = ${value}` : '') : ' (meta: no data)';
      setReadout(`${indexText(t.name, cur.index)} → ${where}${shown}   (${addressFormula(cur.index, strides, t.storage_offset)}${conv})`);
      // stride arcs: one step along each dim
      if (st && g.overlay && target) {
        strides.forEach((stride, d) => {
          if (cur.index[d] + 1 >= t.shape[d]) {
            return;
          }
          const lift = 12 + 9 * (d % 4);
          const cx = target.x + target.w / 2;
          const top = target.y;
          if (stride === 0) {
            const loop = s(doc, 'g', { class: 'fv-arc fv-arc-self', 'data-dim': d });
            loop.append(
              s(doc, 'path', { class: 'fv-arc-path', d: `M${r2(cx - 4)},${r2(top)} C${r2(cx - 14)},${r2(top - lift)} ${r2(cx + 14)},${r2(top - lift)} ${r2(cx + 4)},${r2(top)}`, stroke: ts.color }),
              text(cx + 12, top - lift + 2, `dim ${d} +0 (expand: same element)`, 'fv-arc-label')
            );
            g.overlay!.appendChild(loop);
            return;
          }
          const next = toStripIndex(raw + stride, t.element_size, st.s.element_size);
          const to = g.stripRects.get(next);
          const arc = s(doc, 'g', { class: 'fv-arc', 'data-dim': d, 'data-to': next });
          const label = `dim ${d} +${stride}`;
          if (to) {
            const tx = to.x + to.w / 2;
            const ty = to.y;
            const peak = Math.min(top, ty) - lift;
            arc.append(
              s(doc, 'path', { class: 'fv-arc-path', d: `M${r2(cx)},${r2(top)} C${r2(cx)},${r2(peak)} ${r2(tx)},${r2(peak)} ${r2(tx)},${r2(ty)}`, stroke: ts.color }),
              s(doc, 'circle', { class: 'fv-arc-end', cx: r2(tx), cy: r2(ty), r: 2.5, fill: ts.color }),
              text((cx + tx) / 2, peak + 3, label, 'fv-arc-label', { 'text-anchor': 'middle' })
            );
          } else {
            const dir = stride > 0 ? 1 : -1;
            arc.append(
              s(doc, 'path', { class: 'fv-arc-path', d: `M${r2(cx)},${r2(top)} q${r2(dir * 14)},${-lift} ${r2(dir * 28)},${-lift}`, stroke: ts.color }),
              text(cx + dir * 30, top - lift + 3, `${label} → storage[${next}] (not shown)`, 'fv-arc-label', { 'text-anchor': dir > 0 ? 'start' : 'end' })
            );
          }
          g.overlay!.appendChild(arc);
        });
      }
      return;
    }
    // a storage cell: every logical cell (in the shown windows) that reads it
    const g = groupOfStrip(cur.strip);
    const st = strips.get(cur.strip);
    if (!g || !st) {
      setReadout(null);
      return;
    }
    g.stripEls.get(cur.addr)?.classList.add('fv-hot');
    const target = g.stripRects.get(cur.addr);
    const names: string[] = [];
    let n = 0;
    for (const ts of g.tensors) {
      const flats = ts.readers.get(cur.addr);
      if (!flats || !ts.box) {
        continue;
      }
      const idxs = boxIndices(ts.box.start, ts.box.size);
      for (const f of flats) {
        const k = key(ts.t.id, idxs[f]);
        g.cellEls.get(k)?.classList.add('fv-hot');
        const rect = g.cellRects.get(k);
        if (rect && target && g.overlay && n < MAX_CONNECTORS) {
          g.overlay.appendChild(connector(rect, target, ts.color));
        }
        n++;
        if (names.length < MAX_READERS) {
          names.push(indexText(ts.t.name, idxs[f]));
        }
      }
    }
    const more = n > names.length ? `, … and ${n - names.length} more` : '';
    const v = st.s.has_data ? st.known.get(cur.addr) : undefined;
    const val = st.s.has_data ? (v ? `   (value ${v})` : '') : '   (meta: no data)';
    const bytes = bytesMode ? `   bytes ${cur.addr * st.s.element_size}–${(cur.addr + 1) * st.s.element_size - 1}` : '';
    setReadout(`storage[${cur.addr}] ← ${n ? names.join(', ') + more : 'no tensor reads it in the shown windows'}${val}${bytes}`);
  }

  function cellEvent(e: Event): Element | null {
    const t = e.target as Element | null;
    const c = t?.closest?.('.fv-cell, .fv-storage-cell') ?? null;
    return c && el.contains(c) ? c : null;
  }

  const onOver = (e: Event) => {
    const c = cellEvent(e);
    if (c) {
      const k = keyOfEl(c);
      setHot(k ? hotFromKey(k) : null);
    } else if (!(e.target as Element | null)?.closest?.('.fv-sd-canvas')) {
      // Blank canvas between cells keeps the mapping (no flicker); the cards and pagers end it.
      restoreHot();
    }
  };
  /** Back to the focused cell, if any, when the pointer leaves the cells. */
  function restoreHot() {
    const a = doc.activeElement;
    const k = a && el.contains(a) ? keyOfEl(a) : null;
    setHot(k ? hotFromKey(k) : null);
  }
  const onFocusIn = (e: FocusEvent) => {
    const c = cellEvent(e);
    if (c) {
      const k = keyOfEl(c);
      setHot(k ? hotFromKey(k) : null);
    }
  };
  const onFocusOut = (e: FocusEvent) => {
    const rel = e.relatedTarget as Element | null;
    // a redraw replaces the focused cell and focuses its successor: keep the mapping then
    if (!rendering && (!rel || !rel.closest?.('.fv-cell, .fv-storage-cell'))) {
      setHot(null);
    }
  };
  const onLeave = () => restoreHot();

  const onKey = (e: KeyboardEvent) => {
    const c = cellEvent(e);
    if (!c || !e.key.startsWith('Arrow')) {
      return;
    }
    e.preventDefault();
    const k = keyOfEl(c);
    const cur = k ? hotFromKey(k) : null;
    if (!cur) {
      return;
    }
    if (cur.kind === 'cell') {
      const ts = tensors.get(cur.tensor);
      if (!ts || !ts.box) {
        return;
      }
      const d = ts.t.shape.length;
      const horiz = e.key === 'ArrowRight' || e.key === 'ArrowLeft';
      const step = e.key === 'ArrowRight' || e.key === 'ArrowDown' ? 1 : -1;
      const dim = e.shiftKey ? (horiz ? d - 3 : d - 4) : horiz ? d - 1 : d - 2;
      if (dim < 0) {
        return;
      }
      const index = cur.index.slice();
      index[dim] += step;
      if (index[dim] < 0 || index[dim] >= ts.t.shape[dim]) {
        return;
      }
      const nk = `c:${key(ts.t.id, index)}`;
      if (boxOffset(ts.box.start, ts.box.size, index) >= 0) {
        focusKey(nk);
      } else {
        moveTensorBox(ts, boxToInclude(ts.t.shape, ts.box, index, maxWindow), nk);
      }
    } else {
      const st = strips.get(cur.strip);
      if (!st) {
        return;
      }
      const perRow = st.geom?.perRow ?? 16;
      const delta = { ArrowRight: 1, ArrowLeft: -1, ArrowDown: perRow, ArrowUp: -perRow }[e.key] ?? 0;
      const a = cur.addr + delta;
      if (a < 0 || a >= st.s.length) {
        return;
      }
      const nk = `s:${st.s.id}|${a}`;
      if (!revealAddr(st, a, nk)) {
        focusKey(nk);
      }
    }
  };

  const onClick = (e: MouseEvent) => {
    const b = (e.target as Element | null)?.closest?.('button');
    if (!b || !el.contains(b)) {
      return;
    }
    const dir = b.classList.contains('fv-page-next') || b.classList.contains('fv-strip-next') ? 1 : -1;
    if (b.classList.contains('fv-page-prev') || b.classList.contains('fv-page-next')) {
      const ts = tensors.get(Number(b.getAttribute('data-tensor')));
      if (ts?.box) {
        moveTensorBox(ts, pageBox(ts.t.shape, ts.box, Number(b.getAttribute('data-dim')), dir, maxWindow), null);
      }
    } else if (b.classList.contains('fv-strip-prev') || b.classList.contains('fv-strip-next')) {
      const st = strips.get(Number(b.getAttribute('data-strip')));
      if (st) {
        moveStrip(st, st.start + dir * stripCount(st));
      }
    }
  };

  el.addEventListener('pointerover', onOver);
  el.addEventListener('mouseover', onOver);
  el.addEventListener('focusin', onFocusIn);
  el.addEventListener('focusout', onFocusOut);
  el.addEventListener('keydown', onKey);
  el.addEventListener('click', onClick);
  groupsEl.addEventListener('mouseleave', onLeave);

  unitsBtn.addEventListener('click', () => {
    bytesMode = !bytesMode;
    unitsBtn.textContent = bytesMode ? 'Units: bytes' : 'Units: elements';
    unitsBtn.setAttribute('aria-pressed', String(bytesMode));
    el.setAttribute('data-fv-units', bytesMode ? 'bytes' : 'elements');
    for (const g of groups) {
      if (g.strip) {
        const st = g.strip;
        st.start = Math.max(0, Math.min(st.start, st.s.length - stripCount(st)));
        renderGroup(g);
        ensureStrip(st);
      }
    }
  });

  // ---- export ------------------------------------------------------------------------------------
  function exportSize(): { w: number; hgt: number } {
    let w = 240;
    let hgt = 0;
    for (const g of groups) {
      w = Math.max(w, g.width);
      hgt += g.height + 24;
    }
    return { w, hgt: Math.max(32, hgt) };
  }

  function exportSVG(): string {
    const host = groups[0]?.svg;
    const tmp = s(doc, 'g', { class: 'fv-sd-export' }) as SVGGElement;
    let y = 0;
    if (!host) {
      const text0 = layout?.message ?? 'no tensors';
      const svg0 = s(doc, 'svg', { class: 'fv-sd-canvas' }) as SVGSVGElement;
      groupsEl.appendChild(svg0);
      tmp.appendChild(text(0, 14, text0, 'fv-strip-label'));
      svg0.appendChild(tmp);
      try {
        return standaloneSvg(tmp, el, 480, 20, `forgeviz: ${text0}`);
      } finally {
        svg0.remove();
      }
    }
    for (const g of groups) {
      if (!g.content) {
        continue;
      }
      const clone = g.content.cloneNode(true) as SVGGElement;
      clone.setAttribute('transform', `translate(0,${y})`);
      tmp.appendChild(clone);
      y += g.height + 24;
    }
    host.appendChild(tmp);
    try {
      const { w, hgt } = exportSize();
      return standaloneSvg(tmp, el, w, hgt, 'forgeviz stride diagram');
    } finally {
      tmp.remove();
    }
  }

  svgBtn.addEventListener('click', () => {
    try {
      download(doc, 'forgeviz-strides.svg', new Blob([exportSVG()], { type: 'image/svg+xml' }));
    } catch (err) {
      showStatus(`SVG export failed: ${errorMessage(err)}`);
    }
  });
  pngBtn.addEventListener('click', async () => {
    try {
      const { w, hgt } = exportSize();
      download(doc, 'forgeviz-strides.png', await svgToPng(doc, exportSVG(), w + 28, hgt + 28));
    } catch (err) {
      showStatus(`PNG export failed: ${errorMessage(err)}`);
    }
  });

  // ---- public API ----------------------------------------------------------------------------------
  function setLayout(lay: StrideLayout) {
    try {
      layout = lay;
      maxWindow = Math.max(1, lay.max_window || 1024);
      tensors.clear();
      strips.clear();
      lay.tensors.forEach((t, i) => {
        let box: Box | null = null;
        let values: string[] | null = null;
        if (t.stride !== null && t.numel > 0) {
          if (t.window) {
            box = { start: t.window.start.slice(), size: t.window.size.slice() };
            values = t.has_data ? t.window.values : null;
          } else {
            box = initialBox(t.shape, maxWindow);
          }
        }
        const ts: TState = {
          t,
          order: i,
          color: TENSOR_COLORS[i % TENSOR_COLORS.length],
          dash: TENSOR_DASHES[i % TENSOR_DASHES.length],
          box,
          values,
          token: 0,
          loading: false,
          readers: new Map()
        };
        tensors.set(t.id, ts);
      });
      for (const sp of lay.strips) {
        const st: SState = { s: sp, start: sp.window_start, known: new Map(), inflight: false, failed: null, geom: null };
        sp.values.forEach((v, i) => st.known.set(sp.window_start + i, v));
        st.start = Math.max(0, Math.min(st.start, sp.length - stripCount(st)));
        strips.set(sp.id, st);
      }
      for (const ts of tensors.values()) {
        computeReaders(ts);
      }
      // groups: one per strip, then the tensors without one
      groups = [];
      const placed = new Set<number>();
      const makeGroup = (st: SState | null, list: TState[], title: string): Group => {
        const svg = s(doc, 'svg', { class: 'fv-sd-canvas', role: 'group', 'aria-label': title }) as SVGSVGElement;
        const cards = h(doc, 'div', { class: 'fv-sd-cards' });
        const section = h(
          doc,
          'section',
          { class: 'fv-sd-group', 'data-strip': st ? st.s.id : -1, 'aria-label': title },
          h(doc, 'div', { class: 'fv-sd-stage' }, svg),
          h(doc, 'div', { class: 'fv-strip-pager' }),
          cards
        );
        for (const ts of list) {
          cards.appendChild(renderCard(ts));
        }
        return {
          strip: st,
          tensors: list,
          section,
          svg,
          content: null,
          overlay: null,
          cards,
          width: 0,
          height: 0,
          cellEls: new Map(),
          cellRects: new Map(),
          stripEls: new Map(),
          stripRects: new Map()
        };
      };
      lay.strips.forEach((sp, i) => {
        const list = [...tensors.values()].filter(ts => ts.t.strip === i);
        list.forEach(ts => placed.add(ts.t.id));
        groups.push(makeGroup(strips.get(sp.id)!, list, `storage ${sp.id} and the tensors that read it`));
      });
      const rest = [...tensors.values()].filter(ts => !placed.has(ts.t.id));
      if (rest.length) {
        groups.push(makeGroup(null, rest, 'tensors without a storage to draw'));
      }
      groupsEl.replaceChildren(...groups.map(g => g.section));
      unitsBtn.hidden = lay.strips.length === 0;
      hot = null;
      for (const g of groups) {
        renderGroup(g);
      }
      for (const ts of tensors.values()) {
        if (ts.t.has_data && !ts.t.window && ts.box) {
          moveTensorBox(ts, ts.box, null, true);
        }
      }
      message.hidden = !lay.message;
      message.textContent = lay.message ?? '';
      renderTranscript();
      showStatus(null);
      el.setAttribute('data-fv-state', 'ready');
    } catch (err) {
      el.setAttribute('data-fv-state', 'error');
      showStatus(`Could not draw the stride diagram: ${errorMessage(err)}`);
    }
  }

  return {
    setLayout,
    exportSVG,
    setWarnings(warnings: string[]) {
      const list = (warnings ?? []).filter(w => typeof w === 'string' && w.length);
      warningStrip.hidden = list.length === 0;
      warningStrip.replaceChildren(
        ...list.map(w => h(doc, 'div', { class: 'fv-warning-item' }, h(doc, 'span', { class: 'fv-warning-icon', 'aria-hidden': 'true' }, '⚠'), ` ${w}`))
      );
    },
    destroy() {
      destroyed = true;
      el.removeEventListener('pointerover', onOver);
      el.removeEventListener('mouseover', onOver);
      el.removeEventListener('focusin', onFocusIn);
      el.removeEventListener('focusout', onFocusOut);
      el.removeEventListener('keydown', onKey);
      el.removeEventListener('click', onClick);
      groupsEl.removeEventListener('mouseleave', onLeave);
      el.replaceChildren();
      el.classList.remove('fv-root', 'fv-strides');
      el.removeAttribute('data-fv-state');
      el.removeAttribute('data-fv-pending');
    }
  };
}
