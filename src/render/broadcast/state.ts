/** The broadcast view's state, shared by its parts (view, player, export). */
import type { BroadcastPlan } from '../../model/wire';

export interface BroadcastState {
  plan: BroadcastPlan | null;
  /** the frame shown */
  k: number;
  playing: boolean;
  destroyed: boolean;
}

/** How many frames ``plan`` has (0 without a plan). */
export function stepCount(st: BroadcastState): number {
  return st.plan?.steps?.length ?? 0;
}

/** The last frame's index (0 for a plan without steps). */
export function lastIndex(st: BroadcastState): number {
  return Math.max(0, stepCount(st) - 1);
}
