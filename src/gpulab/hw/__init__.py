"""Discovery: what a machine is, read from NVML, nvidia-smi captures, sysfs and /proc; `gpulab info`."""

# Besides this face, the modules other packages may import (tests/test_import_graph.py holds every import to them).
DOORS: tuple[str, ...] = ("cuda_visible", "discover", "gpu_census", "host", "nvml", "pci_gpu", "smi.xml", "software")
