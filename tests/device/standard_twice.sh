#!/usr/bin/env bash
# Two standard-tier validation runs of this machine's GPU(s), one after the other, then `gpulab compare` of the
# pair: a healthy GPU measured twice must give "verdict: no regression" and exit 0 (issue 28, item 5), with the
# host load each run recorded. Run from the repository root on a GPU machine with torch installed (no internet):
#     OUT=/some/dir bash tests/device/standard_twice.sh
# Writes under $OUT: a/ and b/ (reports, .md, .html), compare.txt, compare.json, compare.html, exit codes in rc.txt.
set -u
OUT=${OUT:?set OUT to a writable directory}
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT/a" "$OUT/b"
for run in a b; do
    "$PY" -m pytest validate/ -p no:cacheprovider --tier standard --report-dir "$OUT/$run" >"$OUT/$run/pytest.txt" 2>&1
    echo "validate $run: $?" >>"$OUT/rc.txt"
done
A=$(ls "$OUT"/a/report-*.json | head -n 1)
B=$(ls "$OUT"/b/report-*.json | head -n 1)
"$PY" -m gpulab compare "$A" "$B" --html "$OUT/compare.html" >"$OUT/compare.txt" 2>&1
echo "compare: $?" >>"$OUT/rc.txt"
"$PY" -m gpulab compare "$A" "$B" --json >"$OUT/compare.json" 2>/dev/null
head -n 3 "$OUT/compare.txt"
cat "$OUT/rc.txt"
