// Run `jupyter-builder <args>`: from PATH (the template way; pip builds put it
// there), else from $VIRTUAL_ENV or the repo's .venv, so that
// `.venv/bin/jlpm build:prod` works without activating the venv.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const exe = process.platform === 'win32' ? 'jupyter-builder.exe' : 'jupyter-builder';
const bin = process.platform === 'win32' ? 'Scripts' : 'bin';
const candidates = [
  process.env.VIRTUAL_ENV && path.join(process.env.VIRTUAL_ENV, bin, exe),
  path.join(root, '.venv', bin, exe)
].filter(Boolean);

function onPath() {
  const probe = spawnSync(exe, ['--version'], { stdio: 'ignore', shell: process.platform === 'win32' });
  return probe.status === 0;
}

const cmd = onPath() ? exe : candidates.find(c => existsSync(c));
if (!cmd) {
  console.error('jupyter-builder not found: `pip install jupyter-builder` (or activate the venv)');
  process.exit(1);
}
const res = spawnSync(cmd, process.argv.slice(2), { stdio: 'inherit', cwd: root, shell: process.platform === 'win32' });
process.exit(res.status ?? 1);
