"""nvidia-smi's outputs read as records: `nvidia-smi -q -x` (xml), `nvidia-smi topo -m` (topo) and
`nvidia-smi nvlink -s` (nvlink), live or from a captured file."""
