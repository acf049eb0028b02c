#!/usr/bin/env bash
# The CUDA half of the product in one call (issue 56): run where a GPU is lent, with its results under
# $OUT (default results/gpu_check). Every step has its own time limit and goes on after a failure, so
# that one broken step does not eat the 15 minutes; each step's output is in $OUT/<step>.txt and its
# exit status in $OUT/summary.txt.
#
#   OUT=$OUT bash experiments/gpu_check.sh              # on the GPU machine: at most 420 s of step limits
#                                                       # (run it with timeout_s 450; measured only on the CPU)
#   bash experiments/gpu_check.sh --device cpu          # the same steps, small, on the CPU (a dry run)
#
# Steps: 1. pytest -m cuda (the CUDA-graph capture test first, stop at the first failure);
# 2. the benchmark's GPU targets in float32, CUDA graphs on and off; 3. savigp train / predict /
# evaluate on a generated CSV on the device, and train again over one NCCL rank (--nproc 1);
# 4. a composite kernel on the device in float32 against the CPU in float64 (experiments.gpu_parts_check).
set -u
DEVICE=cuda
if [ "${1:-}" = "--device" ]; then DEVICE="$2"; fi
OUT="${OUT:-results/gpu_check}"
mkdir -p "$OUT"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-4}"

step() {  # step NAME SECONDS COMMAND...: run it with a time limit, keep its output and its exit status
  local name="$1" limit="$2"; shift 2
  local t0=$(date +%s)
  timeout "$limit" "$@" > "$OUT/$name.txt" 2>&1
  local rc=$?
  echo "$name rc=$rc $(( $(date +%s) - t0 )) s" | tee -a "$SUMMARY"
}

python - > "$OUT/device.txt" 2>&1 <<'PY'
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
if torch.cuda.is_available():
    print(torch.cuda.get_device_name(0), torch.cuda.get_device_properties(0).total_memory // 2**20, "MiB")
PY
cat "$OUT/device.txt" >> "$SUMMARY"

if [ "$DEVICE" = "cpu" ]; then
  step pytest_cuda 120 python -m pytest -q -x -m cuda tests/savigp/training/test_sync_free_step.py
  step bench_graphs 300 python -m experiments.benchmark --device cpu --dtype float32 --smallest --libraries savigp --no-profile --out "$OUT/bench_graphs"
  step bench_eager 300 python -m experiments.benchmark --device cpu --dtype float32 --smallest --libraries savigp --no-profile --cuda-graphs off --out "$OUT/bench_eager"
  ITER=100; PARTS_ITER=300
else
  step pytest_cuda 120 python -m pytest -q -x -m cuda tests
  step bench_graphs 80 python -m experiments.benchmark --device "$DEVICE" --dtype float32 --gpu-targets --out "$OUT/bench_graphs"
  step bench_eager 50 python -m experiments.benchmark --device "$DEVICE" --dtype float32 --gpu-targets --cuda-graphs off --no-profile --out "$OUT/bench_eager"
  ITER=1000; PARTS_ITER=1000
fi

python - "$OUT/data.csv" "$OUT/test.csv" <<'PY'
import sys
import numpy as np
g = np.random.default_rng(0)
for path, n in zip(sys.argv[1:], (20000, 2000)):
    X = g.uniform(-3, 3, size=(n, 4))
    y = np.sin(2 * X[:, 0]) + 0.5 * X[:, 1] * X[:, 2] + 0.2 * g.standard_normal(n)
    np.savetxt(path, np.column_stack([X, y]), delimiter=",", header="a,b,c,d,y", comments="", fmt="%.6g")
PY
step cli_train 40 python -m savigp train "$OUT/data.csv" --targets y --device "$DEVICE" --iterations "$ITER" --batch-size 1000 --out "$OUT/model.pt"
step cli_predict 20 python -m savigp predict "$OUT/model.pt" "$OUT/test.csv" --device "$DEVICE" --out "$OUT/predictions.csv"
step cli_evaluate 20 python -m savigp evaluate "$OUT/model.pt" "$OUT/test.csv" --targets y --device "$DEVICE" --json
step cli_train_nproc1 40 python -m savigp train "$OUT/data.csv" --targets y --device "$DEVICE" --iterations "$ITER" --batch-size 1000 --nproc 1 --out "$OUT/model_nproc1.pt"
step parts 50 python -m experiments.gpu_parts_check --device "$DEVICE" --iterations "$PARTS_ITER"
echo "done; see $SUMMARY"
