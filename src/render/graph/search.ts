/**
 * Search: find Nodes and Modules by name, reveal (expand the way to) and centre a match, step to
 * the next one, and mark the matches on the drawing; and the search box that drives it (typing
 * searches after a pause, Enter steps, Escape clears).
 */
import { type FoldIndex, revealMatch, type SearchMatch, searchGraph, type VisibleGraph } from './fold';
import type { InteractionState } from './interaction';
import type { Ref } from './stage';

export interface Search {
  /** Find ``text``; the first match is revealed and centred. Returns the number of matches. */
  search(text: string): Promise<number>;
  /** Reveal, centre and mark the next match (wrapping); a new search when the box says something else. */
  next(): Promise<void>;
  /** Mark the matches on what is drawn now, and count them. */
  mark(): void;
  /** A new graph: the same query's matches in it, from the first. */
  rematch(ix: FoldIndex): void;
  /** Drop a search still waiting for the typing to pause. */
  clear(): void;
}

/**
 * Search the graph with the box ``input``, counting in ``count``. What it asks of the view:
 * ``folded``, the fold index (null: no graph) and the expanded Modules now; ``visible``, what is
 * drawn of them; ``reveal``, expand to a set that shows a match; ``centreOn``, pan to a match.
 */
export function createSearch(
  input: HTMLInputElement,
  count: HTMLElement,
  io: InteractionState,
  folded: () => [FoldIndex | null, Set<string>],
  visible: () => VisibleGraph | null,
  reveal: (next: Set<string>) => Promise<void>,
  centreOn: (ref: Ref) => void
): Search {
  let query = '';
  let matches: SearchMatch[] = [];
  let matchIndex = 0;

  function mark() {
    const d = io.drawn;
    const vis = visible();
    if (!d || !vis) {
      return;
    }
    d.g.querySelectorAll('.fv-match, .fv-match-inside, .fv-match-current').forEach(e => e.classList.remove('fv-match', 'fv-match-inside', 'fv-match-current'));
    matches.forEach((m, i) => {
      let target: Element | undefined;
      let inside = false;
      if (m.kind === 'node') {
        const key = vis.nodeItem.get(m.id);
        target = key === undefined ? undefined : d.items.get(key)?.el;
        inside = key !== `n${m.id}`;
      } else {
        const c = d.clusters.get(m.id);
        const key = vis.moduleItem.get(m.id);
        const item = key === undefined ? undefined : vis.items.get(key);
        target = c?.el ?? (key === undefined ? undefined : d.items.get(key)?.el);
        inside = !c && !(item?.kind === 'module' && item.module.id === m.id);
      }
      if (target) {
        target.classList.add(inside ? 'fv-match-inside' : 'fv-match');
        if (i === matchIndex && !inside) {
          target.classList.add('fv-match-current');
        }
      }
    });
    count.textContent = !query ? '' : matches.length ? `${(matchIndex + 1).toLocaleString('en-US')} of ${matches.length.toLocaleString('en-US')} matches` : 'no matches';
  }

  async function goToMatch(i: number) {
    const [ix, open] = folded();
    const m = matches[i];
    if (!ix || !m) {
      return;
    }
    matchIndex = i;
    const next = revealMatch(ix, open, m);
    if (next.size !== open.size) {
      await reveal(next);
    }
    mark();
    centreOn(m.kind === 'node' ? { node: m.id } : { module: m.id });
  }

  async function search(text: string): Promise<number> {
    const [ix] = folded();
    query = text.trim();
    matches = ix ? searchGraph(ix, query) : [];
    matchIndex = 0;
    if (matches.length) {
      await goToMatch(0);
    } else {
      mark();
    }
    return matches.length;
  }

  async function next() {
    if (input.value.trim() !== query || !matches.length) {
      await search(input.value);
    } else {
      await goToMatch((matchIndex + 1) % matches.length);
    }
  }

  let searchTimer: ReturnType<typeof setTimeout> | null = null;
  const clear = () => {
    if (searchTimer !== null) {
      clearTimeout(searchTimer);
      searchTimer = null;
    }
  };
  input.addEventListener('input', () => {
    clear();
    searchTimer = setTimeout(() => {
      searchTimer = null;
      void search(input.value);
    }, 200);
  });
  input.addEventListener('keydown', (e: KeyboardEvent) => {
    if (e.key === 'Enter') {
      e.preventDefault();
      clear();
      void next();
    } else if (e.key === 'Escape') {
      e.preventDefault();
      clear();
      input.value = '';
      void search('');
    }
  });

  return {
    search,
    next,
    mark,
    rematch(ix) {
      matches = query ? searchGraph(ix, query) : [];
      matchIndex = 0;
    },
    clear
  };
}
