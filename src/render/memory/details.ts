/** What the tooltip and the pinned panel say about a hit: the band, the storage, its lifetime, the kernel's details. */
import { CATEGORIES, NO_ID, type StorageDetail } from '../../model/wire';
import { h } from '../common/dom';
import { bytesLabel, type EventFacts, eventFacts, summaryText, timeText, titleText } from './geom';
import type { MemoryContext, MemoryHit } from './context';
import { frame } from './painter';

/** The kernel's answers, asked once per storage. */
export interface DetailCache {
  asked: Map<number, Promise<StorageDetail>>;
  /** the answers that have arrived (or failed) */
  known: Map<number, StorageDetail | Error>;
}

export function newDetailCache(): DetailCache {
  return { asked: new Map(), known: new Map() };
}

export function clearDetails(c: DetailCache): void {
  c.asked.clear();
  c.known.clear();
}

export function fetchDetail(ctx: MemoryContext, storage: number): Promise<StorageDetail> {
  const { asked, known } = ctx.details;
  let p = asked.get(storage);
  if (!p) {
    p = ctx.opts.requestDetail(storage);
    asked.set(storage, p);
    p.then(
      d => known.set(storage, d),
      err => known.set(storage, err instanceof Error ? err : new Error(String(err)))
    );
  }
  return p;
}

function slotAlive(ctx: MemoryContext, hit: MemoryHit): boolean | null {
  if (hit.slot < 0) {
    return null;
  }
  return ctx.store.slotFree[hit.slot] === NO_ID;
}

function lifetimeText(ctx: MemoryContext, hit: MemoryHit): string {
  if (hit.slot < 0) {
    return '';
  }
  const { store, mode } = ctx;
  const a = store.slotAlloc[hit.slot];
  const fr = store.slotFree[hit.slot];
  const at = (i: number) => (mode === 'time' ? timeText(store.cols.time[i]) : `event ${i.toLocaleString('en-US')}`);
  if (fr === NO_ID) {
    return `allocated at ${at(a)}, still alive`;
  }
  const dt = store.cols.time[fr] - store.cols.time[a];
  return `allocated at ${at(a)}, freed at ${at(fr)} (lived ${timeText(dt)})`;
}

/** A time at the precision of the current view (a hundredth of its span). */
function hoverTime(ctx: MemoryContext, t: number): string {
  const f = frame(ctx);
  return timeText(t, ctx.mode === 'time' ? (f.x1 - f.x0) / 100 : undefined);
}

/** The tooltip/pinned content for a hit: band line, title, summary, more (``full``: the autograd node too). */
export function hitContent(ctx: MemoryContext, hit: MemoryHit, full: boolean): Node[] {
  const { doc, store, mode } = ctx;
  const out: Node[] = [];
  const catName = CATEGORIES[hit.category];
  if (hit.kind === 'band') {
    const where = mode === 'time' ? `at ${hoverTime(ctx, hit.u)}` : `after event ${Math.max(0, hit.stateIndex).toLocaleString('en-US')}`;
    out.push(h(doc, 'div', { class: 'fv-mem-tip-band', 'data-category': catName }, `${catName}: ${bytesLabel(hit.bandBytes ?? 0)} live ${where}`));
  }
  if (hit.storage === null || hit.event < 0) {
    return out;
  }
  const facts: EventFacts = eventFacts(store, hit.event, ctx.timeline);
  const k = ctx.details.known.get(hit.storage);
  const d = k && !(k instanceof Error) ? k : null;
  const alive = slotAlive(ctx, hit);
  const title = titleText(hit.storage, d);
  out.push(
    h(
      doc,
      'div',
      { class: 'fv-mem-tip-title' },
      title,
      alive === false ? h(doc, 'span', { class: 'fv-mem-tip-state' }, ' (freed)') : null,
      hit.kind === 'band'
        ? h(doc, 'span', { class: 'fv-mem-tip-action' }, ` · ${facts.action} at ${mode === 'time' ? hoverTime(ctx, store.cols.time[hit.event]) : `event ${hit.event.toLocaleString('en-US')}`}`)
        : null
    )
  );
  const cat = hit.kind === 'block' ? catName : facts.category;
  out.push(h(doc, 'div', { class: 'fv-mem-tip-summary' }, summaryText(facts, d, cat)));
  const more: string[] = [];
  const module = d?.module ?? facts.module;
  if (module) {
    more.push(`module ${module}`);
  }
  const node = d?.node ?? facts.node;
  if (full && node !== null && node !== undefined) {
    more.push(`autograd node ${d?.node_name ? `${d.node_name} ` : ''}#${node}`);
  }
  const life = lifetimeText(ctx, hit);
  if (life) {
    more.push(life);
  }
  if (more.length) {
    out.push(h(doc, 'div', { class: 'fv-mem-tip-more' }, more.join(' · ')));
  }
  if (d?.source) {
    out.push(h(doc, 'pre', { class: 'fv-mem-tip-source fv-code-line' }, d.source));
  }
  if (!k) {
    out.push(h(doc, 'div', { class: 'fv-mem-tip-loading' }, 'asking the kernel for details…'));
  } else if (k instanceof Error) {
    out.push(h(doc, 'div', { class: 'fv-mem-tip-error' }, `details unavailable: ${k.message}`));
  }
  return out;
}
