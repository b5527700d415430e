"""dlrun PyTorch harness: batch norm + ReLU (and batch norm + residual
addition + ReLU) in training, fused into one kernel for channels-last fp32
tensors on a CPU.  Standard library + torch; runs on Python >= 3.6 with
PyTorch >= 1.0.

Why: on a CPU, eager PyTorch runs a ResNet block's batch norm, addition and
ReLU as separate passes over memory (ATen's channels-last batch norm alone
reads its input three times), and inductor's generated reductions are
slower still.  These passes are bound by memory bandwidth, which one core
nearly saturates, so a second thread hardly speeds them up.  The fused
kernel reads and writes each tensor fewer times: forward, one pass for the
statistics and one for ``relu((x - mean) * a + beta [+ residual])``;
backward, one pass for the two per-channel sums and one for the input's
gradient, the ReLU's mask recomputed from the input (or read from the
output where a residual was added) instead of a separate ReLU-backward
pass.  Same arithmetic up to rounding: per-thread sums in double (over
blocks of 16 rows in float), taken from the first row (statistics) or the
mean (backward) so that nothing cancels, combined in thread order (a run
repeats bit for bit); the biased variance normalises and
the unbiased one updates the running estimate, as in PyTorch; NaN passes
through the ReLU as in torch.relu.  Against PyTorch in float64 its error is
about that of PyTorch's own fp32 ops (smaller on large tensors).

The kernel is C, built and loaded by harness_pytorch_kernel.py; where it
cannot be (no compiler, another OpenMP runtime), ``fuse`` says why and the
model runs PyTorch's ops.
"""

import torch

from harness_common import HarnessError
from harness_contract import measured_default
from harness_node import processor_kind
from harness_pytorch_kernel import KERNEL, fused_kernel
from harness_pytorch_knobs import knob_record


def _ptr(t):
    return t.data_ptr() if t is not None else None


class _BNReLU(torch.autograd.Function):
    """relu(batch_norm(x) [+ residual]) in training, running stats updated."""

    @staticmethod
    def forward(ctx, x, weight, bias, residual, running_mean, running_var,
                factor, eps):
        lib = KERNEL["lib"]
        C = x.shape[1]
        rows = x.numel() // C
        shift = x[0, :, 0, 0].contiguous()  # the first row, as floats
        sums = torch.empty(2 * C, dtype=torch.float64)
        lib.dl_stats(x.data_ptr(), rows, C, shift.data_ptr(), sums.data_ptr())
        offset = sums[:C] / rows
        mean = shift.double() + offset
        var = (sums[C:] / rows - offset * offset).clamp(min=0)
        invstd = (var + eps).rsqrt()
        coeffs = torch.stack([mean, weight.detach().double() * invstd,
                              bias.detach().double()]).float()
        y = torch.empty_like(x)
        lib.dl_forward(x.data_ptr(), _ptr(residual), rows, C,
                       coeffs[0].data_ptr(), coeffs[1].data_ptr(),
                       coeffs[2].data_ptr(), y.data_ptr())
        if running_mean is not None:
            unbiased = var * rows / max(rows - 1, 1)
            running_mean.mul_(1 - factor).add_(factor * mean.float())
            running_var.mul_(1 - factor).add_(factor * unbiased.float())
        ctx.save_for_backward(x, y if residual is not None else None, coeffs,
                              invstd)
        return y

    @staticmethod
    def backward(ctx, dy):
        lib = KERNEL["lib"]
        x, y, coeffs, invstd = ctx.saved_tensors
        dy = dy.contiguous(memory_format=torch.channels_last)
        C = x.shape[1]
        rows = x.numel() // C
        mean, a, beta = (c.data_ptr() for c in coeffs)
        sums = torch.empty(2 * C, dtype=torch.float64)
        dz = torch.empty_like(x) if y is not None else None
        lib.dl_backward_sums(dy.data_ptr(), _ptr(y), x.data_ptr(), rows, C,
                             mean, a, beta, sums.data_ptr(), _ptr(dz))
        sum_dz = sums[:C]
        dweight = sums[C:] * invstd  # sum of dz * (x - mean) / std
        a64 = coeffs[1].double()
        k = torch.stack([-a64 * invstd * dweight / rows,
                         -a64 * sum_dz / rows]).float()
        dx = torch.empty_like(x)
        lib.dl_backward_dx((dz if dz is not None else dy).data_ptr(),
                           x.data_ptr(), rows, C, mean, a, beta,
                           k[0].data_ptr(), k[1].data_ptr(),
                           0 if dz is not None else 1, dx.data_ptr())
        return (dx, dweight.float(), sum_dz.float(), dz, None, None, None,
                None)


def _fits(bn, x, residual):
    """Whether the kernel computes what ``bn`` would here: training with
    batch statistics, affine, fp32 channels-last on the CPU."""
    if not (bn.training and bn.affine and x.dim() == 4 and not x.is_cuda
            and x.dtype == torch.float32 and x.numel() > x.shape[1]
            and x.is_contiguous(memory_format=torch.channels_last)):
        return False
    if bn.running_mean is None and bn.track_running_stats:
        return False
    return residual is None or (
        residual.dtype == torch.float32 and residual.shape == x.shape
        and residual.is_contiguous(memory_format=torch.channels_last))


def bn_relu(bn, x, residual=None):
    """relu(bn(x) [+ residual]) through the fused kernel where it fits, else
    None: the model's seam (harness_pytorch_models ``_bn_relu``) then runs
    PyTorch's ops."""
    if KERNEL["lib"] is None or not _fits(bn, x, residual):
        return None
    factor = 0.0
    if bn.track_running_stats:
        bn.num_batches_tracked.add_(1)
        factor = (1.0 / float(bn.num_batches_tracked) if bn.momentum is None
                  else bn.momentum)
    tracked = bn.track_running_stats
    return _BNReLU.apply(x, bn.weight, bn.bias, residual,
                         bn.running_mean if tracked else None,
                         bn.running_var if tracked else None, factor, bn.eps)


def has_bn_relu(model):
    """Whether ``model`` has blocks that the fused kernel can stand in for."""
    return any(hasattr(m, "fused_bn_relu") for m in model.modules())


def switch(model, on):
    """Point ``model``'s batch norm + ReLU blocks at the fused kernel (on) or
    at PyTorch's ops (off)."""
    for m in model.modules():
        if hasattr(m, "fused_bn_relu"):
            m.fused_bn_relu = bn_relu if on else None


def _unfit_run(args, channels_last):
    """Why this run's configuration keeps the kernel out, else None."""
    if getattr(args, "precision", "fp32") != "fp32":
        return "precision %s (the kernel computes in fp32)" % args.precision
    if not channels_last:
        return "the model runs NCHW (the kernel takes channels-last)"
    if getattr(args, "compile", "auto") == "on":
        return "torch.compile is on (it compiles PyTorch's ops instead)"
    return None


def fuse(model, args, channels_last, device_type):
    """Switch ``model``'s blocks to the fused kernel as ``--fused-bn-relu``
    asks: auto (where it can run and was measured to win on this processor
    kind: harness_contract.MEASURED_WINS), on (or exit 2, where the user
    asked for it; a tuned on, or "available", is where it can run) or off.  Returns (the knob's value: on, off
    or n/a, why it is off where it could have been on)."""
    if device_type != "cpu" or not has_bn_relu(model):
        return "n/a", None
    wanted = getattr(args, "fused_bn_relu", "auto")
    if wanted == "off":
        return "off", None
    if wanted == "on" and knob_record({"fused_bn_relu": wanted}, getattr(
            args, "raw_argv", []))["fused_bn_relu"]["source"] != "asked for":
        wanted = "available"  # a tuned on: where it can run
    why_not = _unfit_run(args, channels_last)
    if why_not is None and wanted == "auto" and measured_default(
            "fused_bn_relu", "off", device_type, args.precision,
            processor_kind()) != "on":
        why_not = ("not measured to win on this processor kind (%s)"
                   % (" ".join(str(x) for x in processor_kind() or ())
                      or "unknown"))
    if why_not is None:
        why_not = fused_kernel()[1]
    if why_not is not None:
        if wanted == "on":
            raise HarnessError("--fused-bn-relu on: %s" % why_not)
        return "off", why_not
    switch(model, True)
    return "on", None
