#!/usr/bin/env bash
# The wheels gpu.sh needs on a lent GPU machine that its image lacks (forgeviz's dependencies past torch, numpy,
# pandas and pyarrow, for its Python 3.12), downloaded here into .whl/, which .git/info/exclude then ignores; carry
# .whl and forgeviz/static (built here first: ./dev.sh test, or pip wheel .) in the run. About 43 MB; the call's
# working tree may be at most 64 MiB. On 2026-11-30 these installed and ran gpu.sh on an H200 (torch 2.11, Python
# 3.12). From the repository root: bash tests/benchmarks/gpu_wheels.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo /.whl/ >> .git/info/exclude; }
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl \
  ipython ipython-pygments-lexers decorator jedi parso matplotlib-inline pexpect ptyprocess prompt_toolkit wcwidth \
  stack_data executing asttokens pure_eval traitlets comm anywidget psygnal ipywidgets widgetsnbextension \
  jupyterlab_widgets plotly graphviz "mini-racer>=0.14,<0.15" "resvg-py>=0.5,<0.6" nbformat fastjsonschema \
  jsonschema jsonschema-specifications referencing rpds-py jupyter_core platformdirs expecttest torchviz
du -sh .whl
