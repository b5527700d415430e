"""dlrun PyTorch harness: model FLOP utilisation (MFU) - the model FLOPs a
run achieved as a fraction of (a) the device's nominal dense peak at the
run's precision, from the sourced table below, and (b) a measured matrix-
multiply ceiling handed in with ``--matmul-gflops`` (dlrun passes the
node's stored ``dlrun measure matmul`` rate, in its unit).  Standard library only.

    achieved FLOP/s = FLOPs per token x tokens/s (all devices)
    MFU (peak)      = achieved / (peak per device x devices)
    MFU (matmul)    = achieved / (ceiling x devices on GPUs, x nodes on CPUs:
                      a CPU measurement used the whole node)

A device the table does not name has no peak MFU (null, with the reason);
there is no fallback to another device's peak.  An MFU above 1 is not a
result: the FLOP count, the timing or the peak is wrong, and the run fails
(exit 7) naming the numbers.

Peaks are per device, dense (NVIDIA's datasheets print tensor-core rates
"with sparsity"; their footnote: "Specifications are one-half lower without
sparsity"), at the precision the run computes in: ``amp`` is bfloat16 on
the tensor cores (the LLM's autocast on every device), ``fp32`` the plain
fp32 rate (PyTorch does not use TF32 for matrix products by default).
"""

from harness_common import EXIT_IMPOSSIBLE, HarnessError

_H100 = "NVIDIA H100 Tensor Core GPU datasheet"
_H200 = "NVIDIA H200 Tensor Core GPU datasheet"
#: (name parts that must all appear, name parts that must not) ->
#: {precision: (TFLOP/s per device, source)}; the first match wins.
PEAKS = (
    (("H100", "PCIe"), (), {
        "amp": (756.5, _H100 + ", H100 PCIe: BFLOAT16 Tensor Core "
                "'1,513 teraFLOPS*' (*with sparsity), halved"),
        "fp32": (51.0, _H100 + ", H100 PCIe: FP32 '51 teraFLOPS'")}),
    (("H100", "NVL"), (), {
        "amp": (835.5, _H100 + ", H100 NVL: BFLOAT16 Tensor Core "
                "'1,671 teraFLOPS*' (*with sparsity), halved"),
        "fp32": (60.0, _H100 + ", H100 NVL: FP32 '60 teraFLOPS'")}),
    (("H100",), ("PCIe", "NVL"), {
        "amp": (989.5, _H100 + ", H100 SXM: BFLOAT16 Tensor Core "
                "'1,979 teraFLOPS*' (*with sparsity), halved"),
        "fp32": (67.0, _H100 + ", H100 SXM: FP32 '67 teraFLOPS'")}),
    (("H200", "NVL"), (), {
        "amp": (835.5, _H200 + ", H200 NVL: BFLOAT16 Tensor Core "
                "'1,671 TFLOPS*' (*with sparsity), halved"),
        "fp32": (60.0, _H200 + ", H200 NVL: FP32 '60 TFLOPS'")}),
    (("H200",), ("NVL",), {
        "amp": (989.5, _H200 + ", H200 SXM: BFLOAT16 Tensor Core "
                "'1,979 TFLOPS*' (*with sparsity), halved"),
        "fp32": (67.0, _H200 + ", H200 SXM: FP32 '67 TFLOPS'")}),
    (("B200",), (), {
        "amp": (2250.0, "NVIDIA HGX B200 specifications, per GPU: FP16/BF16 "
                "Tensor Core '4.5 PFLOPS' (with sparsity), halved"),
        "fp32": (75.0, "NVIDIA HGX B200 specifications, per GPU: FP32 "
                 "'75 TFLOPS'")}),
    (("A100",), (), {
        "amp": (312.0, "NVIDIA A100 Tensor Core GPU datasheet: BFLOAT16 "
                "Tensor Core '312 TFLOPS | 624 TFLOPS*' (dense | sparse)"),
        "fp32": (19.5, "NVIDIA A100 Tensor Core GPU datasheet: FP32 "
                 "'19.5 TFLOPS'")}),
    (("MI300X",), (), {
        "amp": (1307.4, "AMD Instinct MI300X specifications: Peak bfloat16 "
                "'1307.4 TFLOPs' (2614.9 with structured sparsity)"),
        "fp32": (163.4, "AMD Instinct MI300X specifications: Peak "
                 "single-precision (FP32) vector '163.4 TFLOPs'")}),
)


def device_peak(device_name, precision):
    """(TFLOP/s per device, source) of ``device_name`` at ``precision``, or
    (None, why not)."""
    for needed, excluded, rates in PEAKS:
        if (all(part in device_name for part in needed)
                and not any(part in device_name for part in excluded)):
            if precision in rates:
                return rates[precision]
            return None, "no %s peak for %s in the table" % (precision,
                                                            device_name)
    return None, ("%s is not in the harness's peak table (no fallback to "
                  "another device's peak)" % device_name)


def mfu_fields(flops_per_token, tokens_per_sec, num_devices, nodes,
               device_type, device_name, precision, matmul_gflops=None):
    """The MFU fields of a result; HarnessError (exit 7) for an MFU above 1.
    ``matmul_gflops``: the measured ceiling per GPU, or per node on CPUs."""
    matmul_tflops = matmul_gflops / 1e3 if matmul_gflops else None
    achieved = float(flops_per_token) * tokens_per_sec / 1e12
    fields = {
        "flops_per_token": int(flops_per_token),
        "achieved_tflops": achieved,
        "achieved_tflops_per_device": achieved / num_devices,
        "mfu_formula": "flops_per_token*tokens_per_sec/(ceiling*count)",
        "mfu_peak": None, "peak_tflops_per_device": None,
        "peak_source": None,
        "mfu_matmul": None, "matmul_gflops": matmul_gflops,
        "matmul_count": None,
    }
    if device_type == "cuda":
        peak, source = device_peak(device_name, precision)
    else:
        peak, source = None, ("a CPU's peak is not in the harness's table: "
                              "MFU is against the measured matmul ceiling")
    fields["peak_source"] = source
    if peak is not None:
        fields["peak_tflops_per_device"] = peak
        fields["mfu_peak"] = achieved / (peak * num_devices)
    if matmul_tflops is not None:
        count = num_devices if device_type == "cuda" else nodes
        fields["matmul_count"] = count
        fields["mfu_matmul"] = achieved / (matmul_tflops * count)
    for key, bound, what in (
            ("mfu_peak", peak, "nominal peak"),
            ("mfu_matmul", matmul_tflops, "measured matmul ceiling")):
        if fields[key] is not None and fields[key] > 1.0:
            raise HarnessError(
                "MFU %.3f against the %s is above 1: %.4g TFLOP/s achieved "
                "(%d FLOPs per token x %.4g tokens/s) exceed %.4g TFLOP/s x "
                "%d; the FLOP count, the timing or the ceiling is wrong"
                % (fields[key], what, achieved, flops_per_token,
                   tokens_per_sec, bound,
                   num_devices if key == "mfu_peak" else
                   fields["matmul_count"]), EXIT_IMPOSSIBLE)
    return fields
