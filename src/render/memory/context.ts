/**
 * What the memory view's parts share: the DOM they draw into, the event store, and the few
 * pieces of state that more than one part reads or writes (x mode, zoom range, hover, pin).
 * State that one part alone keeps (the frame cache, the detail cache) hangs here too, typed by
 * the module that owns it.
 */
import type { MemoryTimeline, StorageDetail } from '../../model/wire';
import type { MemoryStore, XMode } from './data';
import type { DetailCache } from './details';
import type { PaintCache } from './painter';
import type { MemoryUi } from './parts';

export const CANVAS_HEIGHT = 320;

export interface MemoryViewOptions {
  /** What one storage is (shape, dtype, op, cell, line, ...): asked once per storage. */
  requestDetail(storage: number): Promise<StorageDetail>;
  /** Ask the kernel for the whole history again (a gap in the stream, or a reset not from 0). */
  requestReplay(): void;
  /** The x mode, zoom range or pinned storage changed (viewstate.ts): the entry tells the kernel. */
  onViewState?(): void;
}

/** What is under a point of the canvas. */
export interface MemoryHit {
  kind: 'band' | 'block';
  /** category index (CATEGORIES) of the band or block */
  category: number;
  /** the last event at or before the cursor (the state shown there) */
  stateIndex: number;
  /** area view: live bytes of the band's category after ``stateIndex`` */
  bandBytes: number | null;
  /** the event the tooltip describes (nearest in the band; the block's alloc), or -1 */
  event: number;
  storage: number | null;
  /** the storage's lifetime (slot), or -1 */
  slot: number;
  x: number;
  y: number;
  /** x value (seconds or event index) under the cursor */
  u: number;
}

export interface Located {
  view: 'area' | 'blocks';
  /** CSS px, relative to the canvas */
  x: number;
  y: number;
  /** viewport coordinates (for a real mouse) */
  clientX: number;
  clientY: number;
}

export interface MemoryContext {
  readonly el: HTMLElement;
  readonly doc: Document;
  readonly win: (Window & typeof globalThis) | null;
  /** prefix of the ids this view gives its SVG patterns */
  readonly uid: string;
  readonly opts: MemoryViewOptions;
  readonly ui: MemoryUi;
  readonly store: MemoryStore;
  timeline: MemoryTimeline | null;
  mode: XMode;
  /** null: the whole timeline (follows new events) */
  range: [number, number] | null;
  hoverHit: MemoryHit | null;
  pinnedHit: MemoryHit | null;
  destroyed: boolean;
  /** stream.ts: when we asked for a replay that no reset has answered yet */
  replayAsked: number | null;
  /** painter.ts */
  readonly paint: PaintCache;
  /** details.ts */
  readonly details: DetailCache;
}
