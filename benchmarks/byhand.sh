#!/usr/bin/env bash
# The by-hand way to find an onnxruntime regression, as a baseline for `bisect run`:
# for every release, a fresh `python -m venv`, `pip install --no-cache-dir onnxruntime==X numpy`,
# then run the model on the batch and count the rows with NaN or Inf.
#
#   benchmarks/byhand.sh MODEL.onnx BATCH.npz WORKDIR VERSION...
#
# Prints one line per release: "TIME <version> <seconds> <verdict line>" (venv + install + run;
# deleting the venv afterwards is not timed). PYTHON picks the interpreter (default python3).
set -euo pipefail

model=$1 batch=$2 work=$3
shift 3
PY=${PYTHON:-python3}
mkdir -p "$work"

for v in "$@"; do
    venv="$work/venv-$v"
    rm -rf "$venv"
    start=$EPOCHREALTIME
    "$PY" -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check --no-cache-dir "onnxruntime==$v" numpy
    line=$("$venv/bin/python" - "$model" "$batch" <<'EOF'
import sys

import numpy as np
import onnxruntime as ort

sess = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
with np.load(sys.argv[2]) as data:
    feeds = {k: data[k] for k in data.files}
bad = 0
for out in sess.run(None, feeds):
    out = np.asarray(out)
    if out.dtype.kind == "f":
        bad = max(bad, int((~np.isfinite(out.reshape(out.shape[0], -1))).any(axis=1).sum()))
print(f"onnxruntime {ort.__version__}: {bad} rows with NaN or Inf")
EOF
)
    end=$EPOCHREALTIME
    echo "TIME $v $(echo "$end - $start" | bc) $line"
    rm -rf "$venv"
done
