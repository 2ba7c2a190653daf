/**
 * The chrome every view shares: the warning strip, the toolbar and its buttons, the status
 * line and the SVG/PNG export buttons. Each view lays itself out as
 *
 *     el.replaceChildren(warnings.el, toolbar, status.el, ...its own parts)
 *
 * and keeps only what is its own. Pure DOM; imports nothing from Jupyter or anywidget.
 */
import { h } from './dom';
import { download, svgToPng } from './export';

type Child = Node | string | null | undefined | false;

/**
 * The text of a thrown value: an Error's message, a string as it is, anything else as JSON
 * (or ``String(err)`` where JSON has no text for it).
 *
 * @example
 * showStatus(`Could not draw the graph: ${errorMessage(err)}`);
 */
export function errorMessage(err: unknown): string {
  if (err instanceof Error) {
    return err.message;
  }
  if (typeof err === 'string') {
    return err;
  }
  try {
    return JSON.stringify(err) ?? String(err);
  } catch {
    return String(err);
  }
}

// ---- warning strip ------------------------------------------------------------------------------

/** The strip of faults inside forgeviz: ``div.fv-warning[role=alert]``, hidden while empty. */
export interface WarningStrip {
  readonly el: HTMLDivElement;
  /** One ``div.fv-warning-item`` (⚠ icon, then the text) per non-empty string; none hides the strip. */
  set(warnings: string[]): void;
}

/**
 * Make a hidden warning strip.
 *
 * @example
 * const warnings = createWarningStrip(doc);
 * el.replaceChildren(warnings.el, toolbar, status.el);
 * warnings.set(['the hook on node 3 raised: KeyError']);
 */
export function createWarningStrip(doc: Document): WarningStrip {
  const el = h(doc, 'div', { class: 'fv-warning', role: 'alert', hidden: true });
  return {
    el,
    set(warnings: string[]) {
      const list = (warnings ?? []).filter(w => typeof w === 'string' && w.length);
      el.hidden = list.length === 0;
      el.replaceChildren(
        ...list.map(w => h(doc, 'div', { class: 'fv-warning-item' }, h(doc, 'span', { class: 'fv-warning-icon', 'aria-hidden': 'true' }, '⚠'), ` ${w}`))
      );
    }
  };
}

// ---- toolbar ---------------------------------------------------------------------------------------

/**
 * A toolbar button: ``button.fv-btn.<cls>[type=button]`` whose tooltip is also its accessible name.
 *
 * @example
 * const fitBtn = button(doc, 'fv-fit', '⤢ Fit', 'Fit the graph to the view');
 */
export function button(doc: Document, cls: string, label: string, title: string): HTMLButtonElement {
  return h(doc, 'button', { type: 'button', class: `fv-btn ${cls}`, title, 'aria-label': title }, label);
}

/**
 * A ``.fv-btn-group`` of buttons that sit together (a ``div`` or, inline, a ``span``).
 *
 * @example
 * buttonGroup(doc, 'span', svgBtn, pngBtn)
 */
export function buttonGroup(doc: Document, tag: 'div' | 'span', ...buttons: Child[]): HTMLElement {
  return h(doc, tag, { class: 'fv-btn-group' }, ...buttons);
}

/**
 * The view's toolbar: ``div.fv-toolbar[role=toolbar]`` named ``label``, holding ``children`` in order.
 *
 * @example
 * const bar = toolbar(doc, 'Graph tools', buttonGroup(doc, 'div', zoomIn, zoomOut), legend);
 */
export function toolbar(doc: Document, label: string, ...children: Child[]): HTMLDivElement {
  return h(doc, 'div', { class: 'fv-toolbar', role: 'toolbar', 'aria-label': label }, ...children);
}

// ---- status line ----------------------------------------------------------------------------------

export type StatusKind = 'error' | 'info';

/** One line of status under the toolbar: ``div.fv-status[role=status][data-kind]``, hidden while empty. */
export interface StatusLine {
  readonly el: HTMLDivElement;
  /** Show ``text`` (``null`` or empty hides the line) and set ``data-kind`` (the line's default kind if left out). */
  show(text: string | null, kind?: StatusKind): void;
  /** The ``data-kind`` shown last; null before the first ``show``. */
  kind(): StatusKind | null;
}

/**
 * Make a hidden status line. ``defaultKind`` is the ``data-kind`` that ``show`` sets when it is
 * given none (hiding the line sets it too).
 *
 * @example
 * const status = createStatusLine(doc, 'error');
 * status.show('Loading events…', 'info');
 * status.show(null);
 */
export function createStatusLine(doc: Document, defaultKind: StatusKind = 'error'): StatusLine {
  const el = h(doc, 'div', { class: 'fv-status', role: 'status', hidden: true });
  return {
    el,
    show(text: string | null, kind: StatusKind = defaultKind) {
      el.hidden = !text;
      el.textContent = text ?? '';
      el.setAttribute('data-kind', kind);
    },
    kind: () => el.getAttribute('data-kind') as StatusKind | null
  };
}

/**
 * Make ``el`` a view's root: the classes the view's CSS starts from, ``data-fv-state="loading"`` (the page
 * and the tests wait on it), and the warning strip and status line every view shows above its drawing.
 *
 * @example
 * const { warnings, status } = viewRoot(el, 'fv-ranks', 'error');
 */
export function viewRoot(
  el: HTMLElement,
  viewClass: string | null,
  statusKind: StatusKind
): { warnings: WarningStrip; status: StatusLine } {
  el.classList.add('fv-root', ...(viewClass ? [viewClass] : []));
  el.setAttribute('data-fv-state', 'loading');
  const doc = el.ownerDocument;
  return { warnings: createWarningStrip(doc), status: createStatusLine(doc, statusKind) };
}

// ---- export buttons ---------------------------------------------------------------------------------

/** A standalone SVG document and the size to rasterise it at (padding included). */
export interface ExportFrame {
  text: string;
  w: number;
  h: number;
}

export interface ExportButtonsOptions {
  /** What a button downloads, for its tooltip: "Download {what} as SVG". */
  what: string;
  /** The file name without its extension (".svg", ".png" are added); called at the click, before anything is drawn. */
  fileName: string | (() => string);
  /** The standalone SVG text (see common/export.ts ``standaloneSvg``). */
  svg: () => string;
  /** The SVG to rasterise and its size. */
  png: () => ExportFrame;
}

/**
 * Wire an SVG and a PNG button: each click downloads the file; a failure shows
 * "SVG export failed: …" / "PNG export failed: …" as an error on ``status``.
 *
 * @example
 * bindExportButtons(doc, svgBtn, pngBtn, status, {
 *   what: 'the graph', fileName: 'forgeviz-graph',
 *   svg: exportSVG, png: () => ({ text: exportSVG(), w: width + 28, h: height + 28 })
 * });
 */
export function bindExportButtons(
  doc: Document,
  svgBtn: HTMLButtonElement,
  pngBtn: HTMLButtonElement,
  status: StatusLine,
  opts: Omit<ExportButtonsOptions, 'what'>
): void {
  const name = (ext: string) => (typeof opts.fileName === 'string' ? opts.fileName : opts.fileName()) + ext;
  svgBtn.addEventListener('click', () => {
    try {
      download(doc, name('.svg'), new Blob([opts.svg()], { type: 'image/svg+xml' }));
    } catch (err) {
      status.show(`SVG export failed: ${errorMessage(err)}`, 'error');
    }
  });
  pngBtn.addEventListener('click', async () => {
    try {
      const filename = name('.png');
      const f = opts.png();
      download(doc, filename, await svgToPng(doc, f.text, f.w, f.h));
    } catch (err) {
      status.show(`PNG export failed: ${errorMessage(err)}`, 'error');
    }
  });
}

/**
 * Make the SVG and PNG buttons (``fv-export-svg``, ``fv-export-png``) and wire them as
 * ``bindExportButtons`` does.
 *
 * @example
 * const exp = exportButtons(doc, status, {
 *   what: 'the diagram', fileName: 'forgeviz-strides',
 *   svg: exportSVG, png: () => ({ text: exportSVG(), w: 508, h: 48 })
 * });
 * toolbar(doc, 'Stride diagram tools', buttonGroup(doc, 'div', exp.svg, exp.png));
 */
export function exportButtons(doc: Document, status: StatusLine, opts: ExportButtonsOptions): { svg: HTMLButtonElement; png: HTMLButtonElement } {
  const svg = button(doc, 'fv-export-svg', 'SVG', `Download ${opts.what} as SVG`);
  const png = button(doc, 'fv-export-png', 'PNG', `Download ${opts.what} as PNG`);
  bindExportButtons(doc, svg, png, status, opts);
  return { svg, png };
}

// ---- step slider ------------------------------------------------------------------------------------

/** A slider over a sorted list of whole numbers (steps), with ◀ ▶ buttons and the value in words. */
export interface StepSlider {
  /** ``span.fv-step[data-fv-step=<value>]``, hidden until ``set`` gives it values. */
  readonly el: HTMLElement;
  /**
   * Offer ``values`` (ascending; they need not be consecutive: the slider moves by position) with
   * ``value`` picked; empty hides the slider. ``enabled: false`` shows the value but lets no one move it
   * (a saved output, or while a pick is being answered); ``why`` is then its tooltip.
   */
  set(values: readonly number[], value: number, enabled?: boolean, why?: string): void;
  /** The value picked now (NaN before ``set``). */
  value(): number;
}

/**
 * Make a step slider. ``onPick`` gets the value the user moved to (on release or a key, not while
 * dragging); the caller answers with ``set`` once the new value is shown.
 *
 * @example
 * const slider = stepSlider(doc, 'step', step => void showStep(step));
 * toolbar(doc, 'Graph tools', slider.el);
 * slider.set([1, 3, 5], 5);
 */
export function stepSlider(doc: Document, noun: string, onPick: (value: number) => void): StepSlider {
  const range = h(doc, 'input', { class: 'fv-step-range', type: 'range', min: 0, max: 0, step: 1, value: 0, 'aria-label': noun });
  const text = h(doc, 'output', { class: 'fv-step-value', 'aria-live': 'polite' });
  const prev = button(doc, 'fv-step-prev', '◀', `Previous ${noun}`);
  const next = button(doc, 'fv-step-next', '▶', `Next ${noun}`);
  const el = h(doc, 'span', { class: 'fv-step', hidden: true }, prev, range, next, text);
  let values: readonly number[] = [];
  let picked = NaN;
  const words = (i: number) => `${noun} ${values[i]} (${i + 1} of ${values.length})`;
  const pick = (i: number) => {
    const at = Math.max(0, Math.min(values.length - 1, i));
    if (values[at] !== picked && !range.disabled) {
      onPick(values[at]);
    }
  };
  // while dragging, the text follows; the pick happens on release (a kernel round trip per step otherwise)
  range.addEventListener('input', () => {
    text.textContent = words(Number(range.value));
  });
  range.addEventListener('change', () => pick(Number(range.value)));
  prev.addEventListener('click', () => pick(values.indexOf(picked) - 1));
  next.addEventListener('click', () => pick(values.indexOf(picked) + 1));
  return {
    el,
    set(vs, value, enabled = true, why) {
      values = [...vs];
      picked = value;
      const i = Math.max(0, values.indexOf(value));
      el.hidden = values.length === 0;
      range.max = String(Math.max(0, values.length - 1));
      range.value = String(i);
      range.setAttribute('aria-valuetext', words(i));
      text.textContent = words(i);
      el.setAttribute('data-fv-step', String(value));
      for (const c of [range, prev, next]) {
        c.disabled = !enabled;
      }
      prev.disabled ||= i === 0;
      next.disabled ||= i === values.length - 1;
      el.title = enabled ? '' : why ?? '';
    },
    value: () => picked
  };
}
