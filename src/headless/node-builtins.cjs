// Any Node builtin: a lazy proxy whose every member is a do-nothing class/function (enough to load happy-dom in bare V8).
const cache = {};
function dummy(name) {
  if (cache[name]) return cache[name];
  const known = { createContext: o => o, isContext: () => true, runInContext: (c) => (0, eval)(c), ReadableStream: globalThis.ReadableStream, Blob: globalThis.Blob, domainToASCII: d => d, URL: globalThis.URL, URLSearchParams: globalThis.URLSearchParams, performance: globalThis.performance,
    TextDecoder: globalThis.TextDecoder, TextEncoder: globalThis.TextEncoder,
    Buffer: class Buffer { static from(s) { return s; } static isBuffer() { return false; } static alloc() { return new Uint8Array(0); } static concat(a) { return a[0]; } static byteLength(s) { return String(s).length; } },
    fileURLToPath: u => String(u).replace(/^file:\/\//, ''), pathToFileURL: p => new globalThis.URL('file://' + p),
    randomUUID: () => globalThis.crypto.randomUUID(), webcrypto: globalThis.crypto, inspect: v => String(v),
    isIP: () => 0, join: (...a) => a.join('/'), resolve: (...a) => a.join('/'), dirname: p => p, basename: p => p, extname: () => '', sep: '/' };
  let v = known[name];
  if (v === undefined) {
    v = class { constructor() {} on() { return this; } once() { return this; } emit() { return false; } removeListener() { return this; } };
  }
  return (cache[name] = v);
}
const names = 'Blob Buffer PerformanceEntry PerformanceObserver ReadableStream WritableStream TransformStream Script TextDecoder TextEncoder URL URLSearchParams domainToASCII isIP webcrypto Readable Writable Transform PassThrough EventEmitter'.split(' ');
const base = {};
for (const n of names) Object.defineProperty(base, n, { enumerable: true, get: () => dummy(n) });
module.exports = new Proxy(base, { get: (_, k) => (k === '__esModule' ? false : k === 'default' ? module.exports : dummy(String(k))) });
