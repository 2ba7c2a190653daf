// Browser globals a bare V8 (mini-racer) lacks, set before happy-dom loads: the IIFE's banner.
// atob/btoa, TextEncoder/TextDecoder (UTF-8), console, queueMicrotask, performance, URL, ...
(function (g) {
  const B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
  if (typeof g.atob !== 'function') {
    g.atob = function (s) {
      s = String(s).replace(/[\s=]+/g, ''); let out = '', buf = 0, bits = 0;
      for (let i = 0; i < s.length; i++) { buf = (buf << 6) | B64.indexOf(s[i]); bits += 6;
        if (bits >= 8) { bits -= 8; out += String.fromCharCode((buf >> bits) & 255); } }
      return out;
    };
    g.btoa = function (s) { let out = '';
      for (let i = 0; i < s.length; i += 3) { const a = s.charCodeAt(i), b = s.charCodeAt(i + 1), c = s.charCodeAt(i + 2);
        const n = (a << 16) | ((b || 0) << 8) | (c || 0);
        out += B64[(n >> 18) & 63] + B64[(n >> 12) & 63] + (isNaN(b) ? '=' : B64[(n >> 6) & 63]) + (isNaN(c) ? '=' : B64[n & 63]); }
      return out; };
  }
  if (typeof g.TextEncoder !== 'function') {
    g.TextEncoder = class { get encoding() { return 'utf-8'; }
      encode(s = '') { const u = unescape(encodeURIComponent(s)); const a = new Uint8Array(u.length);
        for (let i = 0; i < u.length; i++) a[i] = u.charCodeAt(i); return a; } };
  }
  if (typeof g.TextDecoder !== 'function') {
    g.TextDecoder = class { constructor(l = 'utf-8') { this.encoding = l; }
      decode(a) { if (!a) return ''; const b = a instanceof Uint8Array ? a : new Uint8Array(a.buffer || a, a.byteOffset || 0, a.byteLength);
        let out = '', i = 0; while (i < b.length) { let c = b[i++];
          if (c > 127) { if (c > 223 && c < 240) { c = ((c & 15) << 12) | ((b[i++] & 63) << 6) | (b[i++] & 63); }
            else if (c > 239) { c = ((c & 7) << 18) | ((b[i++] & 63) << 12) | ((b[i++] & 63) << 6) | (b[i++] & 63); }
            else { c = ((c & 31) << 6) | (b[i++] & 63); } }
          out += String.fromCodePoint(c); }
        return out; } };
  }
  if (typeof g.console === 'undefined') { const noop = () => {}; g.console = { log: noop, warn: noop, error: noop, info: noop, debug: noop }; }
})(globalThis);
(function (g) {
  if (!g.queueMicrotask) g.queueMicrotask = f => Promise.resolve().then(f);
  if (!g.setInterval) { g.setInterval = () => 0; g.clearInterval = () => {}; }
  if (!g.performance) { const t0 = Date.now(); g.performance = { now: () => Date.now() - t0, timeOrigin: t0, mark() {}, measure() {} }; }
  if (!g.structuredClone) g.structuredClone = v => JSON.parse(JSON.stringify(v));
  if (!g.crypto) g.crypto = { getRandomValues: a => { for (let i = 0; i < a.length; i++) a[i] = (Math.random() * 256) | 0; return a; }, randomUUID: () => 'xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx'.replace(/[xy]/g, c => ((Math.random() * 16) | 0).toString(16)) };
  if (!g.URLSearchParams) {
    g.URLSearchParams = class { constructor(s = '') { this._p = []; s = String(s).replace(/^\?/, ''); if (s) for (const kv of s.split('&')) { const [k, v = ''] = kv.split('='); this._p.push([decodeURIComponent(k), decodeURIComponent(v)]); } }
      get(k) { const e = this._p.find(p => p[0] === k); return e ? e[1] : null; } has(k) { return this._p.some(p => p[0] === k); }
      append(k, v) { this._p.push([k, String(v)]); } set(k, v) { this.delete(k); this.append(k, v); } delete(k) { this._p = this._p.filter(p => p[0] !== k); }
      forEach(f) { this._p.forEach(([k, v]) => f(v, k, this)); } entries() { return this._p[Symbol.iterator](); } [Symbol.iterator]() { return this._p[Symbol.iterator](); }
      toString() { return this._p.map(([k, v]) => encodeURIComponent(k) + '=' + encodeURIComponent(v)).join('&'); } };
  }
  if (!g.URL) {
    const RE = /^([a-zA-Z][a-zA-Z0-9+.-]*:)(?:\/\/(?:([^:@\/]*)(?::([^@\/]*))?@)?([^:\/?#]*)(?::(\d+))?)?([^?#]*)(\?[^#]*)?(#.*)?$/;
    g.URL = class URL {
      constructor(u, base) { u = String(u); let m = RE.exec(u);
        if (!m) { if (base === undefined) throw new TypeError('Invalid URL: ' + u); const b = new URL(base);
          if (u.startsWith('/')) u = b.origin + u; else if (u.startsWith('?') || u.startsWith('#')) u = b.origin + b.pathname + u; else u = b.origin + b.pathname.replace(/[^\/]*$/, '') + u; m = RE.exec(u); }
        this.protocol = m[1]; this.username = m[2] || ''; this.password = m[3] || ''; this.hostname = m[4] || ''; this.port = m[5] || '';
        this.pathname = m[6] || (m[4] !== undefined ? '/' : ''); this.search = m[7] && m[7] !== '?' ? m[7] : ''; this.hash = m[8] && m[8] !== '#' ? m[8] : ''; }
      get host() { return this.hostname + (this.port ? ':' + this.port : ''); }
      get origin() { return this.hostname ? this.protocol + '//' + this.host : 'null'; }
      get href() { return this.protocol + (this.hostname ? '//' + this.host : '') + this.pathname + this.search + this.hash; }
      set href(v) { Object.assign(this, new URL(v)); }
      get searchParams() { return new URLSearchParams(this.search); }
      toString() { return this.href; } toJSON() { return this.href; }
      static createObjectURL() { return 'blob:null/0'; } static revokeObjectURL() {} };
  }
  for (const n of ['EventTarget', 'Event', 'AbortController', 'AbortSignal', 'Blob', 'ReadableStream', 'MessageChannel', 'Headers', 'FormData', 'XMLHttpRequest', 'WritableStream', 'TransformStream', 'DOMException', 'Buffer'])
    if (!g[n]) g[n] = class { constructor() {} };
})(globalThis);
(function (g) {
  if (!g.setImmediate) { g.setImmediate = (f, ...a) => g.setTimeout(() => f(...a), 0); g.clearImmediate = id => g.clearTimeout(id); }
})(globalThis);
(function (g) {
  if (!g.process) g.process = { env: {}, arch: 'x64', argv: ['node'], listenerCount: () => 0, exit() {}, platform: 'linux', version: 'v20.0.0', versions: {}, cwd: () => '/', nextTick: (f, ...a) => g.queueMicrotask(() => f(...a)), on() {}, emitWarning() {}, hrtime: Object.assign(() => [0, 0], { bigint: () => 0n }) };
})(globalThis);
(function (g) {
  // mini-racer's setTimeout (Atomics.waitAsync) throws for a delay of 0 (waitAsync answers at once,
  // with no promise): wait at least 1 ms there.
  if (typeof g.__timer_manager !== 'undefined' && typeof g.setTimeout === 'function') {
    const st = g.setTimeout;
    g.setTimeout = (f, d, ...a) => st(f, Math.max(1, Number(d) || 0), ...a);
  }
})(globalThis);
