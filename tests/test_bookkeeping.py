"""forgeviz's own bookkeeping stops growing: 2,000 training steps under %load_ext forgeviz, with a
graph view and a memory timeline, cost it no more after the first few hundred than after those."""

from __future__ import annotations

import gc

from forgeviz._capture.ledger_native import _MAX_SHAPES
from forgeviz._capture.session import get_session
from forgeviz.extension import LIVE_TIMELINE_EVENTS

from scenarios import TRAIN_100_STEPS, TRAIN_SETUP

WARM_UP_CELLS = 5  # 500 steps: the live timeline has merged its older history at least once by then


def structures() -> dict[str, int]:
    """The sizes of everything forgeviz keeps that a training loop could grow (per cell tables aside)."""
    session = get_session()
    tracker = session.memory
    ledger = tracker.ledger
    return {
        "events": ledger.stats().count,
        "gradient records": len(session.store.nodes),
        "leaf histories": len(session.store.leaves),
        "dead nodes": len(session.store.dead),
        "shapes": len(ledger._shapes),
        "node names": len(ledger._node_names),
        "claims": len(tracker._claims),
        "parameters": len(tracker._params),
        "optimizer state": len(tracker._states_seen),
        "live storages": len(ledger.live()),
        "own bytes": tracker.own_bytes(),
    }


def test_forgeviz_own_structures_stop_growing_after_warm_up(nb):
    nb.ok(TRAIN_SETUP)
    graph = nb.ok("forgeviz.graph(loss)")
    timeline = nb.ok("forgeviz.memory()")
    assert graph is not None and timeline._tracker is get_session().memory
    sizes = []
    for _ in range(20):  # 2,000 steps
        nb.ok(TRAIN_100_STEPS)
        gc.collect()
        sizes.append(structures())
    assert len(nb["losses"]) == 2000 and get_session().memory.dropped > 0
    warm = sizes[WARM_UP_CELLS:]
    first, second = warm[: len(warm) // 2], warm[len(warm) // 2:]
    # the event history and the names of freed storages fill up to their caps, then merge or forget
    # the older half: they oscillate below a cap that no step count changes
    # (gradient records: of the Nodes that died since the last prune, every 256 deaths, plus those a
    # live graph or a view still has: 15 Nodes a step here)
    prune = get_session().store.prune_every
    capped = {"events": LIVE_TIMELINE_EVENTS, "shapes": 2 * _MAX_SHAPES, "node names": 2 * _MAX_SHAPES,
              "gradient records": prune + 2 * 15, "dead nodes": prune}
    # (the gradient store is the session's: what earlier cells left there, and a view still shows, stays)
    before = {"gradient records": sizes[0]["gradient records"], "dead nodes": sizes[0]["dead nodes"]}
    for name, cap in capped.items():
        allowed = cap + before.get(name, sizes[-1]["live storages"])
        assert max(s[name] for s in sizes) <= allowed, (name, [s[name] for s in sizes])
    for name in sizes[0]:
        if name in capped or name == "own bytes":
            continue
        # after warm-up, nothing else is larger in the second half than it was in the first
        assert max(s[name] for s in second) <= max(s[name] for s in first), (name, [s[name] for s in sizes])
    own = [s["own bytes"] for s in warm]
    assert max(own) - min(own) <= 2 * 2**20, own  # flat within 2 MiB, whatever the step count
    assert timeline._tracker.timeline().own_bytes > 0  # and the memory view's summary says it
