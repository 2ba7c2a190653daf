"""What a headless save costs (forgeviz.headless: the browser's renderers in V8, resvg for PNG; no browser).

  SVG, S1             render_svg("graph", ...) of S1 after backward: the first call (cold: the engine
                      thread starts, V8 loads headless.js and Graphviz's WASM) and warm (median)
  SVG, GPT-2          the GPT-2-small shape (12 blocks, d=768, seq 32) folded as first shown, and with
                      every module expanded: first call and warm
  PNG                 render_png (SVG + resvg at scale 2) of the same
  import forgeviz     a fresh interpreter's ``import forgeviz`` (forgeviz.headless is not imported by it),
                      and ``import forgeviz.headless`` on top
  install size        mini-racer and resvg-py in this venv's site-packages

Run: ``.venv/bin/python tests/benchmarks/bench_save.py`` (after ``jlpm build``). Not a test: nothing asserts.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import torch

from _bench import ROOT  # first: it puts this checkout on sys.path

import forgeviz
from forgeviz import headless
from forgeviz._capture.session import get_session

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from scenarios import make_gpt2  # noqa: E402

REPEAT = 5


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()
    return (time.perf_counter() - start) * 1000, out


def median_ms(fn, repeat: int = REPEAT) -> float:
    return statistics.median(timed(fn)[0] for _ in range(repeat))


def s1_traits() -> dict:
    session = get_session()
    session.install()
    with session.recording():
        x = torch.tensor([2.0], requires_grad=True)
        y = torch.tensor([3.0], requires_grad=True)
        z = x * y
        w = z + x
        loss = w**2
    widget = forgeviz.graph(loss, namespace={"x": x, "y": y, "z": z, "w": w, "loss": loss})
    with session.recording():
        loss.backward()
    widget.refresh()
    return headless.traits_of(widget)


def gpt2_traits() -> tuple[dict, int]:
    session = get_session()
    model = make_gpt2()
    idx = torch.randint(0, 1024, (1, 32))
    with session.recording():
        loss = torch.nn.functional.cross_entropy(model(idx).flatten(0, 1), idx.flatten())
    widget = forgeviz.graph(loss, namespace={"model": model, "loss": loss})
    with session.recording():
        loss.backward()
    widget.refresh()
    return headless.traits_of(widget), len(widget.model.nodes)


def install_size(dist: str) -> int:
    files = metadata.distribution(dist).files or []
    return sum(f.locate().stat().st_size for f in files if Path(f.locate()).is_file())


def import_ms(code: str) -> float:
    script = f"import time; t = time.perf_counter(); {code}; print((time.perf_counter() - t) * 1000)"
    runs = [float(subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                                 check=True).stdout) for _ in range(3)]
    return statistics.median(runs)


def main() -> None:
    s1 = s1_traits()
    gpt2, nodes = gpt2_traits()
    gpt2_all = dict(gpt2, expanded=[m for m in gpt2["graph"]["modules"]["columns"]["id"]]
                    if isinstance(gpt2["graph"]["modules"]["columns"]["id"], list)
                    else list(gpt2["graph"]["modules"]["columns"]["id"]["values"]))
    cold, svg = timed(lambda: headless.render_svg("graph", s1))
    print("headless SVG (V8 + happy-dom + Graphviz WASM in this process)")
    print(f"  S1, first call (engine start)   {cold:8.1f} ms   ({len(svg):,d} chars)")
    print(f"  S1, warm                        {median_ms(lambda: headless.render_svg('graph', s1)):8.1f} ms")
    for label, traits in (("GPT-2 folded", gpt2), ("GPT-2 expanded", gpt2_all)):
        first, svg = timed(lambda: headless.render_svg("graph", traits))
        print(f"  {label} ({nodes} Nodes), first {first:8.1f} ms   ({len(svg):,d} chars)")
        print(f"  {label}, warm{'':14s}{median_ms(lambda: headless.render_svg('graph', traits), 3):8.1f} ms")
    print("headless PNG (render_svg + resvg, scale 2)")
    for label, traits in (("S1", s1), ("GPT-2 folded", gpt2)):
        _, png = timed(lambda: headless.render_png("graph", traits))
        ms = median_ms(lambda: headless.render_png("graph", traits), 3)
        print(f"  {label:31s} {ms:8.1f} ms   ({len(png):,d} bytes)")
    print("import (fresh interpreter, median of 3)")
    print(f"  import forgeviz                 {import_ms('import forgeviz'):8.1f} ms")
    print(f"  import forgeviz, then .headless {import_ms('import forgeviz; import forgeviz.headless'):8.1f} ms")
    print("install size")
    for dist in ("mini-racer", "resvg-py"):
        print(f"  {dist:31s} {install_size(dist) / 2**20:8.1f} MiB")
    print(f"  headless.js                     {headless.BUNDLE.stat().st_size / 2**20:8.1f} MiB")
    print(f"  DejaVuSans.ttf                  {headless.FONT.stat().st_size / 2**20:8.1f} MiB")


if __name__ == "__main__":
    main()
