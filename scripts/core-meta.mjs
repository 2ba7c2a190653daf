// Write lib/core.package.json: the JupyterLab core metadata that the Lab extension is built against
// (`jupyter-builder build --core-package-file`). It is @jupyterlab/core-meta (the newest Lab's
// packages and versions) with forgeviz's own package.json ranges for the Lab packages it depends on.
// Why: the builder takes the version each shared package must have at run time from the core
// metadata, not from package.json. Built against 4.6's, the extension asks for @jupyterlab/apputils
// ^4.7.4, and an older Lab that package.json admits (4.0 ships apputils 4.1) logs "Unsatisfied
// version" in the console. With package.json's ranges, the page checks what `jupyter labextension
// list` checks and what the README promises (tests/browser/test_lab_versions.py runs both ends).
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(import.meta.url);
const core = JSON.parse(readFileSync(require.resolve('@jupyterlab/core-meta/core.package.json'), 'utf8'));
const ours = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')).dependencies;
for (const [name, range] of Object.entries(ours)) {
  // the builder reads `resolutions` over `dependencies`: set the range wherever core lists the package
  for (const field of ['dependencies', 'resolutions']) {
    if (core[field]?.[name]) {
      core[field][name] = range;
    }
  }
}
const out = path.join(root, 'lib', 'core.package.json');
mkdirSync(path.dirname(out), { recursive: true });
writeFileSync(out, JSON.stringify(core, null, 2) + '\n');
