#!/usr/bin/env bash
# Batched neural-style studies on a GPU machine in one call: the loops, eight runs one by one against one batch,
# and the whole 252-run study as shipped (tests/device/batched_study.py says what each phase measures).
#   OUT=/tmp/out bash tests/device/batched_study.sh                 # all GPUs
#   OUT=/tmp/out PHASES=study WORKERS=1 bash tests/device/batched_study.sh   # the study on one GPU
# Needs torch + torchvision with CUDA, nvidia-ml-py, dask distributed, psweep, pandas, PyYAML. Changes no clock,
# power or mode setting.
set -u
cd "$(dirname "$0")/../.."
: "${OUT:?set OUT to the folder for the results}"
PY=${PY:-python3}
export OUT PY PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
"$PY" -c 'import torch, torchvision, pynvml, distributed, psweep, yaml; assert torch.cuda.is_available()' \
  || { echo "batched_study: this python lacks a package above (or CUDA)" >&2; exit 2; }
nvidia-smi -L
exec "$PY" tests/device/batched_study.py
