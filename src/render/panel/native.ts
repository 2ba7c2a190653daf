/**
 * The panel's native-build line: while the kernel builds forgeviz's native libraries in the
 * background (a fresh install's first ``%load_ext forgeviz``), what is compiling and for how long;
 * then that they are in use, or what failed and what the user gets without them (NativeStatus).
 */
import type { NativeStatus } from '../../model/wire';
import { createStatusLine } from '../common/chrome';

export interface NativeLine {
  /** ``div.fv-status.fv-panel-native[data-fv-native="building"|"ready"|"partial"|"failed"]``, hidden with no status */
  readonly el: HTMLDivElement;
  set(status: NativeStatus | null): void;
}

/**
 * Make the line (hidden until a status comes).
 *
 * @example
 * const line = createNativeLine(doc);
 * line.set({ type: 'native', state: 'building', seconds: 9, message: 'Building forgeviz…' });
 */
export function createNativeLine(doc: Document): NativeLine {
  const line = createStatusLine(doc, 'info');
  const el = line.el;
  el.classList.add('fv-panel-native');
  return {
    el,
    set(status: NativeStatus | null) {
      line.show(status ? status.message : null, status && (status.state === 'failed' || status.state === 'partial') ? 'error' : 'info');
      if (status) {
        el.setAttribute('data-fv-native', status.state);
      } else {
        el.removeAttribute('data-fv-native');
      }
    }
  };
}
