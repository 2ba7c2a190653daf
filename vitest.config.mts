import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['tests/ts/**/*.test.ts'],
    environment: 'happy-dom',
    // Graphviz WASM initialisation takes a moment on a 2-core machine.
    testTimeout: 20_000,
    hookTimeout: 30_000,
    pool: 'threads',
    // the widget entries import their stylesheets as text (`?raw`); let Vite return the real CSS.
    css: { include: [/style\/.*\.css/] }
  }
});
