/**
 * Stepping and playing the broadcast frames: one step per interval (the speed slider), a
 * manual step pauses, playing from the last frame starts again from the first.
 */
import { BroadcastState, lastIndex, stepCount } from './state';

export interface Player {
  /** Show frame ``next`` (clamped) unless it shows already. */
  go(next: number): void;
  setPlaying(on: boolean): void;
  togglePlay(): void;
  /** A manual step: pauses playback, then ``go``. */
  manual(next: number): void;
  /** Restart the interval (the speed changed). */
  schedule(): void;
}

export interface PlayerHooks {
  /** the element that carries ``data-step`` and ``data-playing`` */
  el: HTMLElement;
  playBtn: HTMLButtonElement;
  /** ms between steps */
  intervalMs: () => number;
  /** draw frame ``st.k`` */
  render: () => void;
}

export function createPlayer(st: BroadcastState, hooks: PlayerHooks): Player {
  const { el, playBtn } = hooks;
  let timer: ReturnType<typeof setTimeout> | null = null;

  function go(next: number) {
    if (!st.plan) {
      return;
    }
    const n = Math.max(0, Math.min(lastIndex(st), Math.floor(next)));
    if (n === st.k && el.getAttribute('data-step') === String(n)) {
      return;
    }
    st.k = n;
    hooks.render();
  }

  function clearTimer() {
    if (timer !== null) {
      clearTimeout(timer);
      timer = null;
    }
  }

  function setPlaying(on: boolean) {
    st.playing = on && !!st.plan && stepCount(st) > 1;
    playBtn.setAttribute('aria-pressed', String(st.playing));
    playBtn.textContent = st.playing ? '❙❙ Pause' : '▶ Play';
    playBtn.setAttribute('aria-label', st.playing ? 'Pause' : 'Play the steps');
    playBtn.title = st.playing ? 'Pause' : 'Play the steps';
    el.toggleAttribute('data-playing', st.playing);
    clearTimer();
    if (st.playing) {
      schedule();
    }
    // the class stays until the next draw, so the last frame's tween finishes
  }

  function schedule() {
    clearTimer();
    timer = setTimeout(tick, hooks.intervalMs());
  }

  function tick() {
    timer = null;
    if (!st.playing || st.destroyed) {
      return;
    }
    go(st.k + 1);
    if (st.k >= lastIndex(st)) {
      setPlaying(false);
    } else {
      schedule();
    }
  }

  function togglePlay() {
    if (st.playing) {
      setPlaying(false);
      return;
    }
    if (st.k >= lastIndex(st)) {
      st.k = 0; // from the start again
    }
    setPlaying(true);
    hooks.render();
  }

  function manual(next: number) {
    if (st.playing) {
      setPlaying(false);
    }
    go(next);
  }

  return { go, setPlaying, togglePlay, manual, schedule };
}
