"""The board's memory: ECC on with no uncorrectable errors, and no retired pages or remapped rows."""

from __future__ import annotations

from gpulab.checks.health.modes import elsewhere, vgpu_slice
from gpulab.checks.health.verdict import LIVE_SOURCE, failed, gpu_label, passed, product_class, skipped
from gpulab.compat import CONSUMER, DATA_CENTRE
from gpulab.records import Check, GpuInfo


def ecc(gpu: GpuInfo, source: str = LIVE_SOURCE) -> Check:
    name = f"health.ecc[{gpu.index}]"
    e = gpu.ecc_errors
    cls = product_class(gpu)
    ev = {"enabled": gpu.ecc_enabled, "product_class": cls, **vars(e)}
    if vgpu_slice(gpu):
        return elsewhere(
            name, gpu, f"{gpu_label(gpu)}: a vGPU guest cannot see the board's ECC mode: judge it on the host", **ev
        )
    if gpu.ecc_enabled is None:
        why = "a consumer card has no ECC" if cls == CONSUMER else "N/A where a GPU has no ECC"
        return skipped(name, f"{gpu_label(gpu)}: ECC mode not reported by {source} ({why})", **ev)
    if not gpu.ecc_enabled and cls != DATA_CENTRE:
        # GeForce boards with ECC and the RTX workstation boards ship with it off: a choice, not a fault.
        return skipped(
            name,
            f"{gpu_label(gpu)}: ECC is off, as {cls} cards ship; enable it with `nvidia-smi -i {gpu.index} -e 1` "
            "and reboot if this card runs long jobs whose results must be exact",
            **ev,
        )
    if not gpu.ecc_enabled:
        return failed(
            name,
            f"{gpu_label(gpu)}: ECC is disabled; enable it with `nvidia-smi -i {gpu.index} -e 1` and reboot "
            "(data-centre GPUs should run with ECC on)",
            **ev,
        )
    if e.volatile_uncorrected:
        return failed(
            name,
            f"{gpu_label(gpu)}: {e.volatile_uncorrected} uncorrectable ECC errors since the driver loaded: drain "
            "the GPU, reset it, and run the vendor's field diagnostics; replace it if they recur",
            **ev,
        )
    if e.volatile_uncorrected is None and e.aggregate_uncorrected == 0:
        # The board's lifetime count holds every error since the driver loaded too (with MIG on, the driver
        # reports the since-load counts per instance only).
        return passed(name, f"{gpu_label(gpu)}: ECC on, no uncorrectable errors in the board's life", **ev)
    if e.volatile_uncorrected is None:
        life = "" if e.aggregate_uncorrected is None else f" (the board's lifetime count is {e.aggregate_uncorrected})"
        return skipped(
            name, f"{gpu_label(gpu)}: ECC on, but the uncorrectable error count is not reported by {source}{life}", **ev
        )
    return passed(name, f"{gpu_label(gpu)}: ECC on, no uncorrectable errors", **ev)


def memory_retirement(gpu: GpuInfo, source: str = LIVE_SOURCE) -> Check:
    name = f"health.memory_retirement[{gpu.index}]"
    r = gpu.retirement
    ev = dict(vars(r))
    if vgpu_slice(gpu):
        return elsewhere(
            name,
            gpu,
            f"{gpu_label(gpu)}: a vGPU guest cannot see the board's retired memory: judge it on the host",
            **ev,
        )
    if r.remap_failure:
        return failed(name, f"{gpu_label(gpu)}: row remapping failed: the GPU has run out of spare rows; RMA it", **ev)
    if r.remap_pending or r.retired_pending:
        return failed(
            name,
            f"{gpu_label(gpu)}: a page retirement / row remap is pending: reset the GPU (or reboot) to apply it",
            **ev,
        )
    if (r.retired_double_bit or 0) > 0 or (r.remapped_uncorrectable or 0) > 0:
        counts = f"{r.retired_double_bit or 0} double-bit retired pages, {r.remapped_uncorrectable or 0} rows remapped"
        return failed(
            name,
            f"{gpu_label(gpu)}: {counts} for uncorrectable errors: the memory is degrading; watch it, RMA if it grows",
            **ev,
        )
    # Clean only when one mechanism is reported whole: page retirement (Pascal/Volta) or row remapping (Ampere+).
    pages = r.retired_double_bit == 0 and r.retired_pending is False
    rows = r.remapped_uncorrectable == 0 and r.remap_pending is False and r.remap_failure is False
    if not (pages or rows):
        return skipped(name, f"{gpu_label(gpu)}: page retirement / row remapping not reported by {source}", **ev)
    what = " and ".join(w for w, ok in (("no retired pages", pages), ("no remapped rows", rows)) if ok)
    return passed(name, f"{gpu_label(gpu)}: {what}, none pending", **ev)
