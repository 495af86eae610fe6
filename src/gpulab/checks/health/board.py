"""The board at idle: temperature against its own thresholds, no clock throttling, persistence mode."""

from __future__ import annotations

from gpulab.checks.health.modes import elsewhere, vgpu_slice, whole_gpu_notice
from gpulab.checks.health.verdict import LIVE_SOURCE, failed, gpu_label, passed, product_class, skipped
from gpulab.compat import DATA_CENTRE
from gpulab.records import Check, GpuInfo

# Clock-event reasons that are expected and harmless on an idle GPU.
BENIGN_IDLE_REASONS = frozenset({"gpu_idle", "applications_clocks_setting", "display_clocks_setting"})


def thermal(gpu: GpuInfo, source: str = LIVE_SOURCE) -> Check:
    """The temperature against the GPU's own slowdown and shutdown thresholds (from the capture or NVML)."""
    name = f"health.thermal[{gpu.index}]"
    temp, slow, stop = gpu.temperature_c, gpu.temp_slowdown_c, gpu.temp_shutdown_c
    ev = {"temperature_c": temp, "slowdown_c": slow, "shutdown_c": stop}
    if vgpu_slice(gpu):
        return elsewhere(
            name, gpu, f"{gpu_label(gpu)}: a vGPU guest reads no board temperature: judge it on the host", **ev
        )
    if temp is None:
        return skipped(name, f"{gpu_label(gpu)}: temperature not reported by {source}", **ev)
    # Some boards report thresholds relative to the limit (-5 C): only an absolute threshold above 0 is one.
    slow = slow if slow is not None and slow > 0 else None
    stop = stop if stop is not None and stop > 0 else None
    if stop is not None and temp >= stop:
        return failed(
            name,
            f"{gpu_label(gpu)}: {temp:g} C, at or above its shutdown threshold {stop:g} C: the GPU is about to "
            "switch itself off; stop its work and fix the cooling (fans, airflow, inlet temperature, heatsink paste)",
            **ev,
        )
    if slow is not None and temp >= slow:
        return failed(
            name,
            f"{gpu_label(gpu)}: {temp:g} C, at or above its slowdown threshold {slow:g} C: clocks are cut to cool "
            "it; fix the cooling (fans, airflow, inlet temperature, blocked slots beside it)",
            **ev,
        )
    if slow is None and stop is None:
        return skipped(
            name,
            f"{gpu_label(gpu)}: {temp:g} C, but its slowdown/shutdown thresholds are not reported by {source}",
            **ev,
        )
    limit = slow if slow is not None else stop or 0.0
    return passed(
        name,
        f"{gpu_label(gpu)}: {temp:g} C, {limit - temp:g} C below its "
        f"{'slowdown' if slow is not None else 'shutdown'} threshold {limit:g} C",
        **ev,
    )


def persistence(gpu: GpuInfo, source: str = LIVE_SOURCE) -> Check:
    name = f"health.persistence[{gpu.index}]"
    cls = product_class(gpu)
    if gpu.persistence_mode is None:
        return skipped(name, f"{gpu_label(gpu)}: persistence mode not reported by {source}")
    if not gpu.persistence_mode and cls != DATA_CENTRE:
        # A desktop's display server keeps the driver loaded; persistence matters on headless compute servers.
        return skipped(
            name,
            f"{gpu_label(gpu)}: persistence mode is off, usual on a {cls} card; on a headless compute server run "
            "`nvidia-persistenced` so jobs do not pay the driver's initialisation",
            persistence_mode=False,
            product_class=cls,
        )
    if not gpu.persistence_mode:
        return failed(
            name,
            f"{gpu_label(gpu)}: persistence mode is off, so every new process pays the driver's initialisation "
            "(seconds) and clocks reset between jobs; run `nvidia-persistenced` (the driver role enables it)",
            persistence_mode=False,
        )
    return passed(name, f"{gpu_label(gpu)}: persistence mode on", persistence_mode=True)


def idle_throttle(gpu: GpuInfo, source: str = LIVE_SOURCE) -> Check:
    """At idle, the only active clock-event reason should be `gpu_idle`: anything else caps clocks under load.

    Judged only on a GPU shown idle: under load a power cap is the GPU working as designed. A live reading
    (`source` NVML) is taken idle by the caller; a capture must show it (0 % utilisation, no compute process).
    """
    name = f"health.idle_throttle[{gpu.index}]"
    ev = {
        "active": gpu.throttle_reasons,
        "temperature_c": gpu.temperature_c,
        "power_w": gpu.power_draw_w,
        "utilization_gpu_pct": gpu.utilization_gpu_pct,
        "compute_processes": gpu.compute_processes,
    }
    if gpu.throttle_reasons is None:
        return skipped(name, f"{gpu_label(gpu)}: clock throttle reasons not reported by {source}", **ev)
    notice = whole_gpu_notice(gpu)
    if notice is not None:
        return elsewhere(name, gpu, notice, **ev)
    bad = sorted(set(gpu.throttle_reasons) - BENIGN_IDLE_REASONS)
    if not bad:
        return passed(name, f"{gpu_label(gpu)}: no clock throttling at idle", **ev)
    util, procs = gpu.utilization_gpu_pct, gpu.compute_processes
    if (util or 0) > 0 or (procs or 0) > 0:
        load = [f"{util:g} % utilised"] if util else []
        load += [f"{procs} compute process{'es' if procs != 1 else ''}"] if procs else []
        return skipped(
            name,
            f"{gpu_label(gpu)}: busy ({', '.join(load)}) when read, so {', '.join(bad)} is no idle throttling and "
            "cannot be judged here (a power cap under load is the GPU working as designed)",
            **ev,
        )
    if source != LIVE_SOURCE and util is None and "gpu_idle" not in gpu.throttle_reasons:
        return skipped(
            name, f"{gpu_label(gpu)}: utilisation not reported by {source}, so it does not show the GPU idle", **ev
        )
    notes: list[str] = []
    if "sw_power_cap" in bad:
        limit, default = gpu.power_limit_w, gpu.default_power_limit_w
        ev.update(power_limit_w=limit, default_power_limit_w=default, min_power_limit_w=gpu.min_power_limit_w)
        if limit is not None and default is not None and limit < default - 0.5:
            return failed(
                name,
                f"{gpu_label(gpu)}: the power limit is {limit:g} W, below the board's default {default:g} W, and "
                f"the power cap holds its clocks at idle: someone lowered it (`nvidia-smi -i {gpu.index} -pl "
                f"{default:g}` restores it; check the node's provisioning and power-capping daemons)",
                **ev,
            )
        if limit is not None and default is not None:
            # Drivers flag the SW power cap at P8 idle with the default limit: a flag, not a cap on work.
            bad.remove("sw_power_cap")
            notes.append(f"SW power cap flagged at idle with the default limit {default:g} W: harmless")
        if not bad:
            return passed(name, f"{gpu_label(gpu)}: no clock throttling at idle ({'; '.join(notes)})", **ev)
        if bad == ["sw_power_cap"]:
            return skipped(
                name,
                f"{gpu_label(gpu)}: SW power cap flagged at idle, but the power limit and the board's default are "
                f"not both reported by {source}, so the limit cannot be judged (`nvidia-smi -q -d POWER` shows both)",
                **ev,
            )
    fixes = {
        "hw_slowdown": "HW slowdown (power brake or over-temperature signal from the board): check PSU and cooling",
        "hw_thermal_slowdown": "HW thermal slowdown: check airflow, fans and the inlet temperature",
        "sw_thermal_slowdown": "SW thermal slowdown: the GPU is too hot even at idle; check cooling",
        "hw_power_brake_slowdown": "power brake asserted by the system: check PSU redundancy and the BMC logs",
        "sw_power_cap": "SW power cap at idle, and the default power limit is not reported to judge the limit "
        "against (`nvidia-smi -q -d POWER` shows both)",
        "sync_boost": "sync boost ties this GPU's clocks to another's: disable unless intended",
    }
    return failed(
        name,
        f"{gpu_label(gpu)}: clocks throttled at idle by " + "; ".join(fixes.get(b, b) for b in bad),
        **ev,
    )
