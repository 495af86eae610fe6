#!/usr/bin/env bash
# The whole 252-run neural-style study on one GPU machine, over as many calls as it takes (a call runs at most
# BUDGET_S seconds of study, default 470, then Ctrl-C's it): the first call starts it with VGG19 weights fetched
# through gpulab's download path (torch.hub's downloader, hash prefix checked) from a local HTTP server; each later
# call resumes it. A VGG19 `features` state dict of the real shapes (random values, half precision, ~40 MB) stands in
# for the 548 MB file, which cannot be fetched there. The study and the weights cache live in .device/ (ignored by
# git, kept between calls on a warm machine). When the study is complete, its report is packed into $OUT/ns.tar.gz.
#   OUT=/tmp/out bash tests/device/neural_style_full.sh
# Writes $OUT/call-<n>.log (the study's output, its status before and after), $OUT/status.json and $OUT/state.tar.gz.
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:?set OUT to a folder for the results}"
BUDGET_S=${BUDGET_S:-470}
PORT=${PORT:-8765}
STATE=$PWD/.device
STUDY=$STATE/ns
mkdir -p "$STATE/serve"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
export TORCH_HOME=$STATE/torch-home PYTHONUNBUFFERED=1
n=$(find "$STATE" -maxdepth 1 -name 'call-*' | wc -l)
n=$((n + 1))
touch "$STATE/call-$n"
LOG=$OUT/call-$n.log
say() { echo "[$(date +%T)] $*" | tee -a "$LOG"; }

python3 -c 'import torch, pynvml, psweep, distributed, jsonschema, rich, yaml; assert torch.cuda.is_available()' \
  || { echo "neural_style_full: python3 lacks a package above, or CUDA (install .whl/ first)" >&2; exit 2; }
nvidia-smi -L | tee -a "$LOG"

NAME_FILE=$STATE/serve/name
if [ ! -s "$NAME_FILE" ]; then
  python3 - "$STATE/serve" > "$NAME_FILE" <<'PY'
import hashlib, io, sys
from pathlib import Path
import torch
from gpulab.workloads.style_transfer.vgg import vgg19_features
state = {k: v.half() for k, v in vgg19_features(37, "max").state_dict().items()}
buf = io.BytesIO(); torch.save(state, buf); data = buf.getvalue()
name = f"vgg19stand-{hashlib.sha256(data).hexdigest()[:8]}.pth"
(Path(sys.argv[1]) / name).write_bytes(data)
print(name)
PY
fi
NAME=$(cat "$NAME_FILE")
python3 -m http.server "$PORT" --bind 127.0.0.1 --directory "$STATE/serve" >> "$STATE/http.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null' EXIT
sleep 1
URL=http://127.0.0.1:$PORT/$NAME

START=$(date +%s)
if [ ! -d "$STUDY" ]; then
  say "a tiny run through the same weights first (fetches them into the cache)"
  python3 -m gpulab run style_transfer --launcher gpu --size tiny --param "vgg_weights=$URL" >> "$LOG" 2>&1 \
    || { say "the tiny run failed: no study started"; exit 1; }
  say "call $n: starting the study, weights $URL ($(stat -c %s "$STATE/serve/$NAME") bytes)"
  timeout -s INT -k 60 "$BUDGET_S" python3 -m gpulab study run neural-style --param "vgg_weights=$URL" \
    --study-dir "$STUDY" >> "$LOG" 2>&1
else
  say "call $n: resuming; before: $(python3 -m gpulab study status "$STUDY" 2>&1 | head -3 | tr '\n' ' ')"
  timeout -s INT -k 60 "$BUDGET_S" python3 -m gpulab study resume "$STUDY" >> "$LOG" 2>&1
fi
say "study exited $? after $(( $(date +%s) - START )) s"
python3 -m gpulab study status "$STUDY" 2>&1 | tee -a "$LOG"
python3 -m gpulab study status "$STUDY" --json > "$OUT/status.json" 2>> "$LOG"
say "weights requests the server saw: $(grep -c "$NAME" "$STATE/http.log"); cache: $(ls "$TORCH_HOME/hub/checkpoints" 2>&1)"
# The study's state without its images, in case the machine goes back before the next call: unpacked into .device/ns
# and carried, a resume goes on from it (the earlier runs' images are then missing from the grid).
tar czf "$OUT/state.tar.gz" --exclude='*.png' --exclude='*.jpg' -C "$STATE" ns 2>> "$LOG"
if python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if d.get("missing")==0 else 1)' "$OUT/status.json" 2>/dev/null; then
  say "complete: packing the report"
  python3 -m gpulab study report "$STUDY" >> "$LOG" 2>&1
  (cd "$STUDY" && tar czf "$OUT/ns.tar.gz" $(ls report.html report.md report.json database.json sessions.json \
    study.yml study.json 2>/dev/null))
fi
