// Remove build outputs: node scripts/clean.mjs <path>...
import { rm } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
for (const p of process.argv.slice(2)) {
  await rm(path.join(root, p), { recursive: true, force: true });
}
