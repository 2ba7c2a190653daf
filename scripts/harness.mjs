// Serve the renderer harness (tests/ts/harness) against the BUILT bundles and,
// with --screenshot, take a headless-Chromium screenshot of it.
//   node scripts/harness.mjs                       serve on http://127.0.0.1:8765/
//   node scripts/harness.mjs --screenshot out.png [--dark] [--select 1]
import * as esbuild from 'esbuild';
import { readFile } from 'node:fs/promises';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const args = process.argv.slice(2);
const opt = name => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
};
const shot = opt('--screenshot');
const port = Number(opt('--port') ?? (shot ? 0 : 8765));

const harness = await esbuild.build({
  entryPoints: [path.join(root, 'tests', 'ts', 'harness', 'harness.ts')],
  bundle: true,
  format: 'esm',
  target: 'es2022',
  write: false,
  external: ['/forgeviz/*']
});
const harnessJs = harness.outputFiles[0].text;

const types = { '.js': 'text/javascript', '.html': 'text/html', '.css': 'text/css', '.svg': 'image/svg+xml' };
const server = http.createServer(async (req, res) => {
  const url = new URL(req.url, 'http://x');
  try {
    if (url.pathname === '/' || url.pathname === '/index.html') {
      res.writeHead(200, { 'content-type': types['.html'] });
      res.end(await readFile(path.join(root, 'tests', 'ts', 'harness', 'index.html')));
    } else if (url.pathname === '/harness.js') {
      res.writeHead(200, { 'content-type': types['.js'] });
      res.end(harnessJs);
    } else if (url.pathname.startsWith('/forgeviz/static/')) {
      const file = path.join(root, path.normalize(url.pathname).replace(/^\/+/, ''));
      res.writeHead(200, { 'content-type': types[path.extname(file)] ?? 'application/octet-stream' });
      res.end(await readFile(file));
    } else {
      res.writeHead(404).end();
    }
  } catch (err) {
    res.writeHead(500).end(String(err));
  }
});
await new Promise(r => server.listen(port, '127.0.0.1', r));
const base = `http://127.0.0.1:${server.address().port}/`;

if (!shot) {
  console.log(`harness at ${base}  (?theme=dark, ?select=1)`);
} else {
  const q = new URLSearchParams();
  if (args.includes('--dark')) q.set('theme', 'dark');
  if (opt('--select')) q.set('select', opt('--select'));
  const url = `${base}?${q}`;
  const [w, h] = (opt('--size') ?? '980,1100').split(',').map(Number);
  let ok = false;
  try {
    ok = await screenshot(url, path.resolve(shot), w, h);
  } finally {
    server.close();
  }
  process.exit(ok ? 0 : 1);
}

/** Drive headless Chromium over the DevTools protocol: wait for the harness, then capture. */
async function screenshot(url, out, width, height) {
  if (typeof WebSocket === 'undefined') {
    throw new Error('needs a global WebSocket: run with node >= 22 or `node --experimental-websocket`');
  }
  const { spawn } = await import('node:child_process');
  const { mkdtemp, rm, writeFile } = await import('node:fs/promises');
  const os = await import('node:os');
  const profile = await mkdtemp(path.join(os.tmpdir(), 'fv-chromium-'));
  const chromium = process.env.CHROMIUM ?? '/usr/bin/chromium';
  const proc = spawn(
    chromium,
    [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--no-first-run',
      '--disable-quic',
      '--hide-scrollbars',
      `--user-data-dir=${profile}`,
      '--remote-debugging-port=0',
      `--window-size=${width},${height}`,
      'about:blank'
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] }
  );
  try {
    const wsUrl = await new Promise((resolve, reject) => {
      let err = '';
      proc.stderr.on('data', d => {
        err += d;
        const m = /DevTools listening on (ws:\/\/\S+)/.exec(err);
        if (m) resolve(m[1]);
      });
      proc.on('exit', code => reject(new Error(`chromium exited ${code}: ${err}`)));
    });
    const ws = new WebSocket(wsUrl);
    await new Promise((r, j) => {
      ws.onopen = r;
      ws.onerror = j;
    });
    let id = 0;
    const waiting = new Map();
    ws.onmessage = ev => {
      const msg = JSON.parse(ev.data);
      if (msg.id && waiting.has(msg.id)) {
        const { resolve, reject } = waiting.get(msg.id);
        waiting.delete(msg.id);
        msg.error ? reject(new Error(msg.error.message)) : resolve(msg.result);
      }
    };
    const send = (method, params = {}, sessionId) =>
      new Promise((resolve, reject) => {
        const mid = ++id;
        waiting.set(mid, { resolve, reject });
        ws.send(JSON.stringify({ id: mid, method, params, sessionId }));
      });
    const { targetId } = await send('Target.createTarget', { url: 'about:blank' });
    const { sessionId } = await send('Target.attachToTarget', { targetId, flatten: true });
    await send('Emulation.setDeviceMetricsOverride', { width, height, deviceScaleFactor: 1, mobile: false }, sessionId);
    await send('Page.enable', {}, sessionId);
    await send('Page.navigate', { url }, sessionId);
    const t0 = Date.now();
    let state = '';
    while (Date.now() - t0 < 30_000) {
      const r = await send(
        'Runtime.evaluate',
        { expression: "document.body ? (document.body.getAttribute('data-harness') || '') : ''", returnByValue: true },
        sessionId
      );
      state = r.result.value;
      if (state) break;
      await new Promise(r => setTimeout(r, 100));
    }
    const states = await send(
      'Runtime.evaluate',
      {
        expression: "[...document.querySelectorAll('[data-fv-state]')].map(e => e.id + '=' + e.getAttribute('data-fv-state')).join(', ')",
        returnByValue: true
      },
      sessionId
    );
    console.log(`harness: ${state || 'NOT DONE'}; states: ${states.result.value}`);
    const { data } = await send('Page.captureScreenshot', { format: 'png', captureBeyondViewport: false }, sessionId);
    await writeFile(out, Buffer.from(data, 'base64'));
    console.log(`screenshot: ${out}`);
    ws.close();
    return Boolean(state);
  } finally {
    proc.kill();
    await new Promise(r => setTimeout(r, 200));
    await rm(profile, { recursive: true, force: true }).catch(() => undefined);
  }
}
