/**
 * The words of the stride diagram: pure text computed from the wire StrideLayout (sizes,
 * verdicts, overlaps, headers, labels, readouts, transcript lines). No DOM.
 */
import type { Overlap, StorageStrip, TensorLayout, ViewVerdict } from '../../model/wire';
import { addressFormula, indexText, tupleText } from './layout';

/** Okabe–Ito, and a dash pattern per tensor so colour is never the only cue. */
export const TENSOR_COLORS = ['#0072B2', '#D55E00', '#009E73', '#CC79A7', '#E69F00', '#56B4E9'];
export const TENSOR_DASHES = ['none', '6 3', '2 2', '8 3 2 3', '1 3', '12 4'];

/** ``torch.float32`` → ``float32`` */
export const dtypeName = (d: string) => d.replace(/^torch\./, '');
/** ``1 element``, ``1,024 elements`` */
export const plural = (n: number, w: string) => `${n.toLocaleString('en-US')} ${w}${n === 1 ? '' : 's'}`;

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

/** ``text`` cut to ``maxChars`` with an ellipsis. */
export function clip(text: string, maxChars: number): string {
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

/** The badge beside a tensor's name: "contiguous", "non-contiguous", "channels_last", ... */
export function contiguityBadge(t: TensorLayout): string {
  if (t.stride === null) {
    return t.layout;
  }
  const mf = t.memory_format;
  if (mf && mf !== 'contiguous' && mf !== 'none' && mf !== 'ambiguous') {
    return t.is_contiguous ? `contiguous · ${mf}` : mf;
  }
  return t.is_contiguous ? 'contiguous' : 'non-contiguous';
}

/** The two lines under a tensor's name: shape · stride · offset, then dtype · size · device. */
export function tensorHeadLines(t: TensorLayout): [string, string] {
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
  return [line2, line3];
}

/** Which dim runs where in the grid: "dim 1 (size 4) → columns · dim 0 (size 3) ↓ rows". */
export function axesText(shape: readonly number[]): string {
  const d = shape.length;
  const axes: string[] = [];
  if (d === 0) {
    axes.push('0-d tensor: one element');
  } else {
    axes.push(`dim ${d - 1} (size ${shape[d - 1]}) →${d >= 2 ? ' columns' : ''}`);
    if (d >= 2) {
      axes.push(`dim ${d - 2} (size ${shape[d - 2]}) ↓ rows`);
    }
    for (let k = d - 3, level = 1; k >= 0; k--, level++) {
      axes.push(`dim ${k} (size ${shape[k]}) ${level % 2 ? '→' : '↓'} tiles`);
    }
  }
  return axes.join(' · ');
}

/** The accessible name of a logical cell: ``t[1, 2] = 6 → storage[6]``. */
export function cellLabel(name: string, index: readonly number[], value: string | null, addr: number): string {
  return `${indexText(name, index)}${value !== null ? ` = ${value}` : ''} → storage[${addr}]`;
}

/** The line above a storage strip: id, dtype, size, device, data pointer. */
export function stripHeading(sp: StorageStrip): string {
  return `storage ${sp.id} · ${dtypeName(sp.dtype)} · ${plural(sp.length, 'element')} × ${sp.element_size} B = ${bytesText(sp.nbytes)} · ${sp.device}${sp.has_data ? (sp.data_ptr ? ` · data_ptr ${sp.data_ptr}` : '') : ' · meta: no data'}`;
}

/** " bytes 8–11" in bytes mode, else "". */
const bytesRange = (addr: number, elementSize: number, bytesMode: boolean, sep: string) =>
  bytesMode ? `${sep}bytes ${addr * elementSize}–${(addr + 1) * elementSize - 1}` : '';

/** The accessible name of a storage cell: ``storage[6] = 6, read by t, t.T``. */
export function storageCellLabel(addr: number, value: string | undefined, elementSize: number, bytesMode: boolean, readBy: readonly string[]): string {
  return `storage[${addr}]${value !== undefined && value !== '' ? ` = ${value}` : ''}${bytesRange(addr, elementSize, bytesMode, ', ')}${readBy.length ? `, read by ${readBy.join(', ')}` : ''}`;
}

/**
 * The readout for a logical cell: where it reads and why.
 * ``raw`` is the storage element in tensor units, ``addr`` the strip element; ``stripElementSize``
 * is null when no strip is drawn.
 */
export function cellReadout(t: TensorLayout, index: readonly number[], raw: number, addr: number, stripElementSize: number | null, value: string | undefined): string {
  const conv = stripElementSize !== null && stripElementSize !== t.element_size ? ` = ${raw}; ×${t.element_size}/${stripElementSize} bytes → ${addr}` : '';
  const where = stripElementSize !== null ? `storage[${addr}]` : `storage element ${raw} (no strip drawn)`;
  const shown = t.has_data ? (value !== undefined && value !== '' ? ` = ${value}` : '') : ' (meta: no data)';
  return `${indexText(t.name, index)} → ${where}${shown}   (${addressFormula(index, t.stride ?? [], t.storage_offset)}${conv})`;
}

/** The readout for a storage cell: the first ``names`` of the ``n`` logical cells that read it. */
export function storageReadout(addr: number, names: readonly string[], n: number, sp: StorageStrip, value: string | undefined, bytesMode: boolean): string {
  const more = n > names.length ? `, … and ${n - names.length} more` : '';
  const val = sp.has_data ? (value ? `   (value ${value})` : '') : '   (meta: no data)';
  const bytes = bytesRange(addr, sp.element_size, bytesMode, '   ');
  return `storage[${addr}] ← ${n ? names.join(', ') + more : 'no tensor reads it in the shown windows'}${val}${bytes}`;
}

/** One transcript line about a tensor (``strip``: the id of the storage drawn for it, if any). */
export function tensorTranscript(t: TensorLayout, strip: number | null): string {
  if (t.stride === null) {
    return `${t.name}: shape ${tupleText(t.shape)}, ${dtypeName(t.dtype)}, layout ${t.layout} has no strides${t.panel ? ` (${t.panel.title}: ${t.panel.explanation})` : ''}.`;
  }
  const ext = t.extent ? `elements ${t.extent[0]} to ${t.extent[1]}` : 'no elements';
  return (
    `${t.name}: shape ${tupleText(t.shape)}, stride ${tupleText(t.stride)}, storage offset ${t.storage_offset}, ` +
    `${dtypeName(t.dtype)} (${t.element_size} bytes per element) on ${t.device}, ${t.is_contiguous ? 'contiguous' : 'not contiguous'}` +
    `${strip !== null ? `; reads storage ${strip}, ${ext}` : ''}${t.has_data ? '' : '; meta tensor, no data'}.`
  );
}

/** One transcript line about a storage (``names``: its readers, comma-separated). */
export function stripTranscript(sp: StorageStrip, names: string): string {
  return `storage ${sp.id}: ${plural(sp.length, 'element')} of ${dtypeName(sp.dtype)} (${bytesText(sp.nbytes)}) on ${sp.device}, read by ${names || 'no tensor'}${sp.copy ? '; a copy with its own storage' : ''}.`;
}
