#!/usr/bin/env bash
# Accelerator checks for the backends, for a machine with an NVIDIA GPU (or an Intel GPU/NPU).
#
#   bash scripts/device_check.sh            # from the repository root
#   PYTHON=/path/to/python bash scripts/device_check.sh
#
# 1. what the runtimes see (ORT providers, OpenVINO devices, `sparseloom devices`);
# 2. the accelerator tests (`pytest -m gpu`), which skip with a reason when a device is absent;
# 3. latency of the same models on every available processor, CPU versus CUDA/TensorRT/GPU,
#    through `sparseloom infer --json` (median and p90 of REPEAT runs).
# Works from a plain checkout: the repository root is put on PYTHONPATH.
set -uo pipefail
cd "$(dirname "$0")/.."
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
REPEAT=${REPEAT:-50}
WORK=${WORK:-$(mktemp -d)}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export SPARSELOOM_CACHE_DIR=${SPARSELOOM_CACHE_DIR:-$WORK/cache}
export SPARSELOOM_DISABLE_PLUGIN_AUTOLOAD=1
status=0

echo "== environment"
command -v nvidia-smi >/dev/null && nvidia-smi -L
"$PYTHON" - <<'PY'
import sys
print("python", sys.version.split()[0])
try:
    import onnxruntime as ort
    print("onnxruntime", ort.__version__, ort.get_available_providers())
except Exception as error:
    print("onnxruntime: not importable:", error)
try:
    import openvino as ov
    print("openvino", ov.__version__, ov.Core().available_devices)
except Exception as error:
    print("openvino: not importable:", error)
PY
"$PYTHON" -m sparseloom devices || status=1

echo "== accelerator tests (pytest -m gpu)"
plugin=()
"$PYTHON" -c "import importlib.metadata as m; m.distribution('sparseloom')" 2>/dev/null \
    || plugin=(-p sparseloom.testing)
"$PYTHON" -m pytest -q -rs -m gpu "${plugin[@]}" -p no:cacheprovider \
    tests/plugins/backends tests/core/test_inference.py || status=1

echo "== latency: every available processor, same models ($REPEAT runs each)"
"$PYTHON" - "$WORK" <<'PY' || status=1
import sys
from pathlib import Path

import onnx

from sparseloom.plugins.backends._bench import conv_model
from tests.plugins.backends.models import transformer_block

work = Path(sys.argv[1])
onnx.save(conv_model(channels=64, size=64), work / "conv64.onnx")
onnx.save(transformer_block(tokens=128, dim=256, heads=4), work / "transformer256.onnx")
PY
names=$("$PYTHON" -m sparseloom devices --json \
    | "$PYTHON" -c "import json,sys; print(' '.join(r['name'] for r in json.load(sys.stdin) if r['available']))")
printf '%-22s %-20s %12s %12s %s\n' model processor median_ms p90_ms runs_on
for model in conv64 transformer256; do
    for name in $names; do
        out=$("$PYTHON" -m sparseloom infer "$WORK/$model.onnx" --processor "$name" \
              --repeat "$REPEAT" --json 2>"$WORK/err.txt")
        if [[ $? -ne 0 ]]; then
            printf '%-22s %-20s %s\n' "$model" "$name" "FAILED: $(tail -1 "$WORK/err.txt")"
            status=1
            continue
        fi
        echo "$out" | "$PYTHON" -c "import json,sys; r=json.load(sys.stdin); \
print(f\"{'$model':<22} {r['processor']:<20} {r['latency_ms']['median']:>12.3f} \
{r['latency_ms']['p90']:>12.3f} {','.join(r['executed_by'])}\")"
    done
done
exit $status
