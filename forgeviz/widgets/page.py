"""A saved view as a self-contained offline HTML page: the view's own browser bundle, inlined, draws
the saved data over a stand-in model (no kernel, no network, works from ``file://``).

The page is what ``.save("x.html")`` writes and what the broadcast's HTML button downloads; it
mounts the view with JupyterLab's own saved-output stand-in (src/lab/saved.ts, built as static/saved.js).
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

#: The built browser bundles (forgeviz/static/<view>.js), one per view.
STATIC = Path(__file__).resolve().parents[1] / "static"

# esbuild ends an ESM bundle with ``export{x as default, ...};``: the page binds that default export
# to a global instead, so the bundle runs from an inline script, offline, even from file://.
_EXPORTS = re.compile(r"export\s*\{([^}]*)\}\s*;?\s*$")

# The view mounted as JupyterLab mounts a saved output: the same stand-in model (static/saved.js,
# built from src/lab/saved.ts), its messages, then its view state.
_MOUNT = """
const saved = JSON.parse(document.getElementById('forgeviz-data').textContent);
forgevizSaved.setTheme(document, document.body.dataset.jpThemeLight === 'false' ? 'dark' : 'light');
forgevizSaved.mountSaved(document.getElementById('forgeviz'), saved, globalThis.__forgevizView);
"""


def standalone_page(payload: dict, theme: str = "light") -> str:
    """A self-contained offline HTML page drawing ``payload`` (a saved output's
    ``application/vnd.forgeviz.v1+json``, see ``base.saved_payload``), interactive where the saved
    data allows (the graph's folds and inspector, the broadcast's steps).

    >>> page = standalone_page({"version": 1, "view": "broadcast", "summary": "a + b", "traits": {}})
    >>> "<html" in page and "forgeviz-data" in page
    True
    """
    if theme not in ("light", "dark"):
        raise ValueError(f"theme: expected 'light' or 'dark', got {theme!r}")
    view = payload.get("view")
    bundle, mount = STATIC / f"{view}.js", STATIC / "saved.js"
    source = bundle.read_text(encoding="utf-8") if bundle.exists() and mount.exists() else ""
    match = _EXPORTS.search(source)
    default = None
    if match:
        for part in match.group(1).split(","):
            name, _, alias = part.strip().partition(" as ")
            if alias.strip() == "default":
                default = name.strip()
    if match is None or default is None:
        script = "document.body.textContent = 'forgeviz: the browser bundle is missing; install forgeviz with pip.';"
    else:
        script = (mount.read_text(encoding="utf-8") + "\n" + source[: match.start()]
                  + f"\nglobalThis.__forgevizView = {default};\n" + _MOUNT)
    dark = theme == "dark"
    # the colours come from the theme's variables (static/saved.js setTheme)
    body_style = "margin:16px;font-family:system-ui,sans-serif;background:var(--jp-layout-color0,#fff);"
    data = json.dumps(payload).replace("</", "<\\/")
    script = script.replace("</script", "<\\/script")
    title = f"forgeviz {view}: {payload.get('summary') or ''}".strip(": ")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{{body_style}}}</style>
</head><body data-jp-theme-light="{'false' if dark else 'true'}"><div id="forgeviz"></div>
<script type="application/json" id="forgeviz-data">{data}</script>
<script type="module">
{script}
</script></body></html>
"""
