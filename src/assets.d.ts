/** CSS imported as text (esbuild plugin in scripts/build-esm.mjs; Vite's native `?raw`). */
declare module '*.css?raw' {
  const text: string;
  export default text;
}
