"""gpulab: provision GPU servers, carve GPU-passthrough VMs, and prove the hardware delivers."""

__version__ = "0.1.0"
