"""Probes: what the silicon delivers, each judged as a % of the SKU's datasheet figure (bound and source recorded)."""

import pytest

from gpulab import names
from gpulab.probes import judge, nccl_tests, torch_probes
from gpulab.probes.allreduce import run_allreduce
from gpulab.records import Check
from gpulab.validation import remeasure
from gpulab.workloads import precision_plan

torch = pytest.importorskip("torch", reason="torch is not installed: install gpulab[torch] to run the probes")


@pytest.fixture(scope="module")
def tier(lab):
    return lab.options.tier.meaning


@pytest.fixture(scope="module")
def size(tier):
    return tier.probe


def judged(lab, measure, what):
    """Measure (`measure(size_factor)`), record and judge; an interval straddling the bound is measured again with
    more windows, merged into the same row and judged again (gpulab.validation.remeasure)."""
    result = measure(1)
    exp = lab.record_result(result)
    return remeasure.settle(
        lambda: judge.check(result, exp, what, lab.report.checks),
        lambda: remeasure.merge_into(result, measure(remeasure.AGAIN_FACTOR)),
    )


@pytest.mark.live  # this machine's CPU: not the captured host's
@pytest.mark.parametrize("threads", ["all", "1"])
def test_cpu_matmul(lab, verdict, threads):
    before = torch.get_num_threads()
    if threads == "1":
        torch.set_num_threads(1)
    try:
        verdict(
            judged(
                lab,
                lambda k: torch_probes.matmul("cpu", names.Precision.FP32, torch_probes.CPU_SMALL.again(k)),
                "fp32 matmul",
            )
        )
    finally:
        torch.set_num_threads(before)


@pytest.mark.live
def test_cpu_memory_copy(lab, verdict):
    measure = lambda k: torch_probes.copy_bandwidth("cpu", torch_probes.CPU_SMALL.again(k))  # noqa: E731
    verdict(judged(lab, measure, "host memory copy"))


@pytest.fixture(scope="module")
def matmul_row(lab, measured_rows, size):
    """GPU `gpu`'s matmul row at a precision, measured once (test_matmul and test_gpus_perform_alike share it)."""

    def row(gpu, precision):
        device = f"cuda:{lab.gpus.index(gpu)}"
        return measured_rows.get(
            ("matmul", device, precision, size), lambda: torch_probes.matmul(device, precision, size)
        )

    return row


def lacks(lab, gpu, precision):
    """Why `gpu` has no `precision` to measure (its datasheet lists no rate, or its architecture predates it)."""
    spec = lab.spec(gpu)
    if spec is not None:
        if getattr(spec, precision.spec_field) is None:
            return f"{spec.name} ({spec.architecture}) has no {precision} rate"
        return None
    plan = precision_plan.for_gpu(None, gpu.compute_capability, gpu.architecture)
    if plan is not None and not plan.has(precision):
        return f"{gpu.name} (compute capability {gpu.compute_capability}) has no {precision}"
    return None


@pytest.mark.gpu
@pytest.mark.live
@pytest.mark.parametrize("precision", list(names.Precision), ids=str)
def test_matmul(lab, gpu, verdict, precision, matmul_row, size):
    device = f"cuda:{lab.gpus.index(gpu)}"
    missing = lacks(lab, gpu, precision)
    if missing:
        verdict(Check(judge.check_name("matmul", precision, device), "skip", missing))
    result = matmul_row(gpu, precision)
    verdict(
        remeasure.settle(
            lambda: judge.check(result, lab.expectation_for(result), f"{precision} matmul", lab.report.checks),
            lambda: remeasure.merge_into(result, torch_probes.matmul(device, precision, size.again())),
        )
    )
    torch_probes.release_cached_memory()


@pytest.mark.gpu
@pytest.mark.live
def test_device_memory_bandwidth(lab, gpu, verdict, size):
    device = f"cuda:{lab.gpus.index(gpu)}"
    verdict(judged(lab, lambda k: torch_probes.copy_bandwidth(device, size.again(k)), "device-to-device copy"))
    torch_probes.release_cached_memory()


@pytest.mark.gpu
@pytest.mark.live
@pytest.mark.parametrize("direction", ["h2d", "d2h"])
def test_pinned_host_transfer(lab, gpu, verdict, direction, size):
    device = f"cuda:{lab.gpus.index(gpu)}"
    measure = lambda k: torch_probes.host_transfer(device, direction, size.again(k))  # noqa: E731
    verdict(judged(lab, measure, f"pinned {direction} copy"))
    torch_probes.release_cached_memory()


@pytest.mark.multi_gpu
@pytest.mark.live
@pytest.mark.parametrize("precision", [names.Precision.BF16, names.Precision.FP32], ids=str)
def test_gpus_perform_alike(lab, verdict, precision, matmul_row):
    """One GPU slower than its identical siblings points at that GPU: cooling, power, a bad link."""
    measured = [matmul_row(gpu, precision) for gpu in lab.gpus if not lacks(lab, gpu, precision)]
    torch_probes.release_cached_memory()
    rows = {r.device: r.value for r in measured}
    if len(rows) < 2:
        verdict(
            Check(
                f"probe.gpus_alike.{precision}",
                "skip",
                f"fewer than two {precision} matmul results to compare",
            )
        )
    slow = judge.slower_than_siblings(rows)
    evidence = {"tflops": rows, "min_ratio_to_median": 0.9}
    if slow:
        detail = ", ".join(f"{dev} at {ratio:.0%} of the median" for dev, ratio in slow.items())
        verdict(
            Check(
                f"probe.gpus_alike.{precision}",
                "fail",
                f"{detail}: check that GPU's clocks, temperature and power readings in the report",
                evidence,
            )
        )
    verdict(Check(f"probe.gpus_alike.{precision}", "pass", f"{len(rows)} GPUs within 10 % of their median", evidence))


@pytest.mark.multi_gpu
@pytest.mark.live
def test_peer_access_where_linked(lab, verdict):
    """GPUs joined by NVLink (or one PCIe switch) must reach each other directly (P2P)."""
    topo = lab.fingerprint.topology
    missing, checked = [], []
    for a, ga in enumerate(lab.gpus):
        for b, gb in enumerate(lab.gpus):
            if a == b:
                continue
            link = topo[ga.index][gb.index] if ga.index < len(topo) and gb.index < len(topo[ga.index]) else "?"
            if link.startswith("NV") or link in ("PIX", "PXB"):
                checked.append(f"{ga.index}-{gb.index}:{link}")
                if not torch.cuda.can_device_access_peer(a, b):
                    missing.append(f"GPU {ga.index} -> GPU {gb.index} ({link})")
    evidence = {"pairs": checked}
    if not topo:
        verdict(Check("probe.p2p", "skip", f"GPU topology not reported by {lab.source}: linked pairs unknown"))
    if not checked:
        verdict(Check("probe.p2p", "skip", "no NVLink or shared-switch pairs: P2P not expected", evidence))
    if missing:
        verdict(
            Check(
                "probe.p2p",
                "fail",
                "no peer access for " + ", ".join(missing) + ": in a VM, pass the GPUs with a P2P clique "
                "(x-nv-gpudirect-clique) and keep `kvm hidden` off; on bare metal, disable ACS on the switch "
                "ports",
                evidence,
            )
        )
    verdict(Check("probe.p2p", "pass", f"peer access works for all {len(checked)} linked pairs", evidence))


@pytest.mark.multi_gpu
@pytest.mark.live
def test_allreduce_bus_bandwidth(lab, verdict, tier):
    mib = tier.allreduce_mib
    first = run_allreduce(len(lab.gpus), mib=mib, iters=24)
    if not first.params.get("correct"):
        verdict(Check("probe.allreduce", "fail", "all-reduce returned a wrong sum: the interconnect corrupts data"))
    measure = lambda k: first if k == 1 else run_allreduce(len(lab.gpus), mib=mib, iters=24 * k)  # noqa: E731
    verdict(remeasure.unless_contended(judged(lab, measure, f"all-reduce {mib} MiB bus bandwidth"), lab))


@pytest.mark.multi_gpu
@pytest.mark.live
def test_allreduce_nccl_tests(lab, verdict, tier):
    """The same figure from NVIDIA's nccl-tests, when `all_reduce_perf` is installed (PATH or $NCCL_TESTS_BIN)."""
    binary = nccl_tests.find_binary()
    if binary is None:
        verdict(
            Check("probe.allreduce.nccl_tests", "skip", "nccl-tests' all_reduce_perf not found (PATH, $NCCL_TESTS_BIN)")
        )
        return
    size = tier.nccl_tests_size
    result = nccl_tests.run_all_reduce_perf(binary, len(lab.gpus), size=size)
    if not result.params.get("correct"):
        verdict(
            Check(
                "probe.allreduce.nccl_tests",
                "fail",
                "nccl-tests counted wrong elements: the interconnect corrupts data",
            )
        )
    verdict(judged(lab, lambda k: result, f"nccl-tests all-reduce {size} bus bandwidth"))
