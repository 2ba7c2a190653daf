"""Memory timeline rendering: 1M synthetic events in headless Chromium (Debian's), first paint and frames.

Run after installing: ``.venv/bin/python tests/benchmarks/bench_memory_render.py``. The page loads the
same ``memory.js`` the widget uses, from a local file, builds 1,000,000 events with the synthetic
generator (a small MLP loop; bundled here with esbuild, since the widget does not ship it), feeds them as
encoded little-endian column buffers, and measures:
first paint (decode + totals + the first frame), then 120 animation frames of panning and zooming.
"""

from __future__ import annotations

import functools
import http.server
import json
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "browser"))

from labdriver import ARTIFACTS, launch_chromium  # noqa: E402 - tests/browser on sys.path first

PAGE = """<!doctype html><html><body><div id="fv" style="width:1000px"></div>
<script type="module">
import * as mem from './memory.js';
import { buildSynthetic } from './synthetic.js';
const N = %d;
const trace = buildSynthetic(N, 1);
const buffers = mem.encodeColumns(trace.columns);
const el = document.getElementById('fv');
const t0 = performance.now();
const view = mem.createMemoryView(el, { requestDetail: () => new Promise(() => {}), requestReplay: () => {} });
view.setTimeline({ ...trace.timeline, count: N });
view.appendEvents(0, mem.decodeColumns(buffers), true);
await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
const firstPaint = performance.now() - t0;
const frames = [];
let last = performance.now();
for (let k = 0; k < 120; k++) {
  const span = 1 / (1 + k / 10);
  const mid = 0.5 + 0.3 * Math.sin(k / 15);
  const [a, b] = [trace.columns.time[0], trace.columns.time[N - 1]];
  view.setRange?.(a + (b - a) * (mid - span / 2), a + (b - a) * (mid + span / 2));
  await new Promise(r => requestAnimationFrame(r));
  const now = performance.now();
  frames.push(now - last);
  last = now;
}
frames.sort((x, y) => x - y);
window.result = { events: N, first_paint_ms: firstPaint, frame_median_ms: frames[60], frame_p95_ms: frames[113],
                  fps_median: 1000 / frames[60] };
</script></body></html>"""


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def main(n: int = 1_000_000) -> None:
    from playwright.sync_api import sync_playwright

    static = ROOT / "forgeviz" / "static" / "memory.js"
    if not static.exists():
        raise SystemExit("build the frontend first (./dev.sh test or jlpm build:esm:prod)")
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        (Path(tmp) / "memory.js").write_bytes(static.read_bytes())
        subprocess.run([str(ROOT / "node_modules" / ".bin" / "esbuild"),
                        str(ROOT / "tests" / "ts" / "memory-synthetic.ts"),
                        "--bundle", "--format=esm", f"--outfile={Path(tmp) / 'synthetic.js'}", "--log-level=warning"],
                       check=True)
        (Path(tmp) / "index.html").write_text(PAGE % n)
        # module scripts do not load from file:// pages: serve the folder on localhost
        handler = functools.partial(_QuietHandler, directory=tmp)
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        browser = launch_chromium(p)
        page = browser.new_page(viewport={"width": 1100, "height": 700})
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"http://127.0.0.1:{server.server_address[1]}/index.html")
        try:
            page.wait_for_function("() => window.result", timeout=120_000)
        except Exception:  # noqa: BLE001 - a timeout or a crashed page: either way, say what the page said
            raise SystemExit(f"no result; page errors: {errors}")
        result = page.evaluate("() => window.result")
        browser.close()
        server.shutdown()
    print(json.dumps(result, indent=2))
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "bench-memory-render.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
