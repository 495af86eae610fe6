#!/usr/bin/env bash
# On a GPU machine without internet: the neural-style study with VGG19 weights fetched through gpulab's download
# path (torch.hub's download_url_to_file, hash prefix from the file name) from a local HTTP server, then loaded by the
# same loader as torchvision's vgg19-dcbb9e9d.pth. A VGG19 `features` state dict of the real shapes (random values,
# half precision, ~40 MB) stands in for the 548 MB file. Writes everything under $OUT.
#   VARIANT=gpu-slot (default; 53 full-size runs) or "" for the whole 252-run study; PORT=8765.
# Run from the repository root: bash tests/device/fetched_weights_study.sh
set -euo pipefail
OUT=${OUT:?set OUT to a folder for the results}
VARIANT=${VARIANT-gpu-slot}
PORT=${PORT:-8765}
SERVE=$(mktemp -d)
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
export TORCH_HOME=$SERVE/torch-home  # an empty torch.hub cache: the file must be fetched
NAME=$(python3 - "$SERVE" <<'PY'
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
)
python3 -m http.server "$PORT" --bind 127.0.0.1 --directory "$SERVE" > "$OUT/http.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER' EXIT
sleep 1
URL=http://127.0.0.1:$PORT/$NAME
{
  echo "weights file: $NAME ($(stat -c %s "$SERVE/$NAME") bytes) served at $URL"
  echo "--- a wrong checksum is one line, nothing cached:"
  python3 -m gpulab run style_transfer --launcher gpu --size tiny \
    --param "vgg_weights=http://127.0.0.1:$PORT/vgg19-deadbeef.pth" && echo "UNEXPECTED: it ran" || true
  ls "$TORCH_HOME/hub/checkpoints" 2>/dev/null || echo "(checkpoints folder empty or absent)"
} > "$OUT/fetch-checks.txt" 2>&1
START=$(date +%s)
python3 -m gpulab study run neural-style ${VARIANT:+--variant "$VARIANT"} --param "vgg_weights=$URL" \
  --study-dir "$OUT/ns" > "$OUT/study.log" 2>&1 || echo "study exited $?" >> "$OUT/study.log"
echo "study wall: $(( $(date +%s) - START )) s" >> "$OUT/study.log"
ls -la "$TORCH_HOME/hub/checkpoints" >> "$OUT/fetch-checks.txt"
grep -c "$NAME" "$OUT/http.log" >> "$OUT/fetch-checks.txt" || true  # requests the server saw for the file
grep -o "Stand-ins:[^<]*" "$OUT/ns/report.html" >> "$OUT/fetch-checks.txt" || echo "no stand-ins line" >> "$OUT/fetch-checks.txt"
