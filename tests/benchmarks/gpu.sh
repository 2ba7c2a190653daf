#!/usr/bin/env bash
# The GPU list, for a session lent a CUDA GPU: the CUDA tests, then the GPU arms of the benchmarks.
# From the repository root: bash tests/benchmarks/gpu.sh [what ...], where what is any of
# sync record capture pieces tests compile budget (all seven by default, in this order: the likeliest to matter first,
# since a lease is short, and an item the time left cannot hold is skipped; record: bench_record.py on the GPU, ~20 s
# on an H200; pieces: bench_capture.py pieces 256 32 cuda, the MLP's step piece by piece on the host's clock beside
# its wall time in each arm, which says whether what the MLP's summaries cost on a GPU is the host's work or a wait;
# budget: bench_capture.py budget, %fv grads within 10% / 5% / 2% beside each, MLP and GPT-2, ~40 s) cadence
# (%fv grads each / every 10 / shown) profile (bench_capture.py profile: where the default arm's time goes, for the
# models in FORGEVIZ_PROFILE_MODELS, "mlp gpt2 resnet" unless set) kernels
# (bench_kernels.py: the summary kernels against torch's reads, ~15 s) ddp (bench_record.py ddp: recording as two CPU
# ranks under DDP, on a machine whose cores leave each rank and gloo room, ~1 min) record-profile (bench_record.py mlp
# cuda with FORGEVIZ_BENCH_PROFILE=1: where a GPU rank's recording spends its time, ~30 s) (those five not by default).
# With FORGEVIZ_BENCH_ROUNDS=3 allow ~330 s for sync + capture (an outer timeout of 200 s cut the GPT-2 arms once).
# The native libraries are built first, so that no arm is timed
# while they build. Figures go to stdout and to $OUT/gpu.log if $OUT is set. The whole list ends within
# FORGEVIZ_GPU_SECONDS (540 by default, for one device call of 600 s): each command's timeout is its own or what is
# left, whichever is less, and an item with under 15 s left is skipped, saying so. On an H200 (2026-11-30, 3 rounds)
# the native build took 74 s, sync 30 s, record 20 s, and capture's MLP about 30 s.
#
# The machine needs torch with CUDA. forgeviz runs from this checkout (PYTHONPATH), with forgeviz/static
# built here and carried. Its other dependencies, if missing there, travel as wheels in .whl/
# (tests/benchmarks/gpu_wheels.sh fetches them here); they are installed into /tmp/site first. Building the native
# libraries there takes ~50 s: with FORGEVIZ_CACHE=$PWD/.gpucache, copy .gpucache/native/*.so back from one
# run ($OUT) and carry .gpucache in the next (they match that machine's torch only).
set -uo pipefail
cd "$(dirname "$0")/../.."
py=${PYTHON:-python3}
log=${OUT:+$OUT/gpu.log}
log=${log:-/tmp/forgeviz-gpu.log}
if compgen -G ".whl/*.whl" >/dev/null; then
  $py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site || exit 1
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
export FORGEVIZ_BENCH_ROUNDS=${FORGEVIZ_BENCH_ROUNDS:-5} FORGEVIZ_BENCH_PROGRESS=1  # (each arm's time as it ends)
what=${*:-sync record capture pieces tests compile budget}
deadline=$((SECONDS + ${FORGEVIZ_GPU_SECONDS:-540}))
t() {  # t SECONDS command...: the command under a timeout of SECONDS, or of what is left before the deadline
  local left=$((deadline - SECONDS))
  if [ "$left" -lt 15 ]; then echo "  (skipped, ${left} s left: ${*:2})"; return 0; fi
  timeout $(($1 < left ? $1 : left)) "${@:2}"
}
{
  nvidia-smi -L
  $py -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
  echo "=== native ($(date -u +%T))"
  t 180 $py -m forgeviz._capture.native
  for w in $what; do
    echo "=== $w ($(date -u +%T))"
    case $w in
      sync)   # all of test_device_summary.py: on a GPU its Triton tests run the compiled kernels (one gradient a
              # launch; the parameters' .grad, many a launch) on CUDA tensors, and its training steps run under
              # torch.cuda.set_sync_debug_mode("error")
        (cd tests && t 240 $py -m pytest -c ../pyproject.toml --rootdir .. -q -p no:cacheprovider -rs \
          test_device_summary.py) ;;
      tests)  # every other CUDA test, and CPU tests beside them
        (cd tests && t 300 $py -m pytest -c ../pyproject.toml --rootdir .. -q -p no:cacheprovider -rs \
          -k "cuda or compile" test_memory_cuda.py test_record_memory.py test_compile.py test_graph.py test_strides.py test_broadcast.py \
          test_panel.py test_doctor.py test_summary.py test_record.py) ;;
      capture)
        t 100 $py tests/benchmarks/bench_capture.py 256 32 cuda
        # (on an H200, 2026-11-30: GPT-2's "capture, torch ops" arm ran past 180 s, since mended; its other arms
        # took about a second a call, Triton's first compile 2.4 s)
        t 180 $py tests/benchmarks/bench_capture.py gpt2 cuda
        t 140 $py tests/benchmarks/bench_capture.py resnet cuda ;;
      pieces) t 90 $py tests/benchmarks/bench_capture.py pieces 256 32 cuda ;;
      profile)  # where the default arm's time goes: not by default (its figures are places to look, not ratios)
        for m in ${FORGEVIZ_PROFILE_MODELS:-mlp gpt2 resnet}; do
          t 120 $py tests/benchmarks/bench_capture.py profile $m cuda
        done ;;
      compile) t 300 $py tests/benchmarks/bench_compile.py cuda inductor ;;
      record)  # recording on top of capture: the parameters' gradients on the device path (no host read)
        t 150 $py tests/benchmarks/bench_record.py mlp gpt2 cuda ;;
      record-profile) t 90 env FORGEVIZ_BENCH_PROFILE=1 $py tests/benchmarks/bench_record.py mlp cuda ;;
      kernels) t 120 env FORGEVIZ_KERNEL_VARIANTS=1 $py tests/benchmarks/bench_kernels.py ;;
      ddp) t 120 env FORGEVIZ_BENCH_ROUNDS=100 $py tests/benchmarks/bench_record.py ddp ;;
      budget)  # the "within P%" cadences: each arm's round a cell of 200 MLP steps (12 of GPT-2)
        t 90 $py tests/benchmarks/bench_capture.py budget mlp cuda
        t 150 $py tests/benchmarks/bench_capture.py budget gpt2 cuda ;;
      cadence)
        t 90 env FORGEVIZ_BENCH_CADENCE=1 $py tests/benchmarks/bench_capture.py 256 32 cuda
        t 150 env FORGEVIZ_BENCH_CADENCE=1 $py tests/benchmarks/bench_capture.py gpt2 cuda ;;
    esac
  done
  echo "=== done ($(date -u +%T))"
} 2>&1 | tee "$log"
