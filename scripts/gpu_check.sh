#!/usr/bin/env bash
# Every check of docs/gpu-validation.md in one go on a machine with an NVIDIA GPU (about 8 minutes at
# most; each part is cut off at its own limit so the others still report):
#
#   scripts/gpu_check.sh OUT
#
# The parts that compare FLOPs, links and kernel names run side by side; the timed parts (roofline,
# calibration, init() overhead) run afterwards, alone on the GPU. Each part's output lands in
# OUT/PART.txt, its kernel names in OUT/kernels_PART.tsv, its traces and records under OUT/PART/.
set -u
OUT=${1:?usage: scripts/gpu_check.sh OUT}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
  $PY -c "import sys, torch; print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda)"
  $PY -c "from pyprof.annotate import ops; print('C accelerator', 'on' if ops._fast_call else 'off')"
} > "$OUT/env.txt" 2>&1

part() {  # part LIMIT NAME ARGS...: one part, cut off after LIMIT seconds
  local limit=$1 name=$2; shift 2
  timeout "$limit" "$PY" "$@" > "$OUT/$name.txt" 2>&1
  echo "$name: exit $?" >> "$OUT/env.txt"
}
part 270 examples scripts/gpu_check.py examples "$OUT" &
part 270 zoo1 scripts/gpu_check.py zoo "$OUT" resnet50 vit_b_16 gpt lstm convnet_bf16 mlp_compiled \
  custom_function moe_einsum packed_rnn &
part 270 zoo2 scripts/gpu_check.py zoo "$OUT" checkpoint_llama ckpt_llama_bf16 unet sepconv tcn broadcast_lora \
  attn_compiled bert bert_bf16 &
part 270 zoo_tf32 scripts/gpu_check.py zoo "$OUT" resnet50 gpt bert vit_b_16 --tf32 &
part 270 compiled scripts/gpu_check.py compiled "$OUT" &
part 420 nsys scripts/nsys_capture.py "$OUT/nsys" &
wait
part 80 roofline scripts/gpu_check.py roofline "$OUT"
part 130 bench_init scripts/bench_init.py --device cuda --quick
