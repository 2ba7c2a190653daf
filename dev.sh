#!/usr/bin/env bash
# forgeviz entry point, the two README commands:
#   ./dev.sh lab    install what is missing, then open JupyterLab on examples/ with forgeviz ready
#   ./dev.sh test   install what is missing (venv, torch, the project, Chromium, g++), then lint, typecheck
#                   and run every test
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(pwd)
VENV="$ROOT/.venv"
PY="$VENV/bin/python"

log() { printf '\n==> %s\n' "$*" >&2; }

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    echo "dev.sh: '$*' needs root (no sudo found)" >&2; exit 1; fi
}

ensure_python_env() {
  local base
  base=$(command -v python3.11 || command -v python3)
  [ -x "$PY" ] || { log "creating $VENV"; "$base" -m venv "$VENV"; }
  # torch first and exactly 2.13.0: any other spec pulls the multi-GB CUDA build (../shared/STACK.md).
  "$PY" -c 'import torch' 2>/dev/null || { log "installing torch==2.13.0 (CPU)"; "$PY" -m pip install -q torch==2.13.0 numpy; }
  install_forgeviz "$1"
}

install_forgeviz() {  # $1: the extra (lab, test)
  # Build the wheel fresh each run and install that file, as a user would: the JupyterLab-version
  # tests install the same wheel into an older Lab's environment (tests/browser/test_lab_versions.py).
  log "building the forgeviz wheel (builds the JupyterLab extension and the widget bundle)"
  rm -f "$ROOT"/dist/forgeviz-*.whl
  "$PY" -m pip wheel -q --no-deps -w "$ROOT/dist" "$ROOT"
  local wheel=("$ROOT"/dist/forgeviz-*.whl)
  # uninstalled first: pip keeps an installed forgeviz of the same version
  "$PY" -m pip uninstall -q -y forgeviz 2>/dev/null || true
  "$PY" -m pip install -q "${wheel[0]}[$1]"
}

apt_install() {
  log "installing with apt: $*"
  as_root apt-get update -q
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@"
}

ensure_system_packages() {  # test: Chromium for the browser tests, g++ for the native memory tracker
  local missing=()
  command -v chromium >/dev/null || missing+=(chromium)
  command -v g++ >/dev/null || command -v c++ >/dev/null || missing+=(g++)
  [ ${#missing[@]} -eq 0 ] || apt_install "${missing[@]}"
}

build_native_tracker() {
  # Compiles forgeviz's CPU allocator ledger against the installed torch (~10 s, once per torch).
  # Without a compiler forgeviz still works, with the slower dispatch-mode memory tracker.
  "$PY" -m forgeviz._capture.native || log "the native memory tracker was not built; memory timelines use the dispatch-mode tracker"
}

cmd_lab() {
  ensure_python_env lab
  if ! command -v g++ >/dev/null && ! command -v c++ >/dev/null; then
    { [ "$(id -u)" = 0 ] || command -v sudo >/dev/null; } && apt_install g++ || true
  fi
  build_native_tracker
  local extra=()
  [ "$(id -u)" = 0 ] && extra+=(--allow-root)
  log "JupyterLab on examples/ (forgeviz: %load_ext forgeviz in any notebook)"
  exec "$VENV/bin/jupyter" lab --notebook-dir="$ROOT/examples" "${extra[@]}" "$@"
}

cmd_test() {
  ensure_python_env test
  ensure_system_packages
  "$PY" -m forgeviz._capture.native  # the tests exercise it: a build failure must be red
  local status=0
  log "lint (ruff) and typecheck (tsc)"
  "$VENV/bin/ruff" check forgeviz tests || status=1
  "$VENV/bin/jlpm" typecheck || status=1
  log "TypeScript unit tests (vitest)"
  "$VENV/bin/jlpm" test || status=1
  log "Python and browser tests (pytest)"
  # Run from tests/ so `import forgeviz` is the installed package, as a user gets it.
  (cd tests && "$VENV/bin/pytest" -c "$ROOT/pyproject.toml" --rootdir "$ROOT" "$ROOT/tests" "$@") || status=1
  return $status
}

case "${1:-}" in
  lab) shift; cmd_lab "$@" ;;
  test) shift; cmd_test "$@" ;;
  *) echo "usage: ./dev.sh lab | ./dev.sh test [pytest args]" >&2; exit 2 ;;
esac
