"""dlrun PyTorch harness: feature checks for old PyTorch releases.  Newer
features are used only where this PyTorch has them (``hasattr``-style checks,
never version comparisons); ``torch_mod`` is replaceable so that tests can
present an old release.  Standard library + torch; runs on Python >= 3.6
with PyTorch >= 1.0.
"""

import sys

import torch

from harness_common import HarnessError
from harness_contract import amp_dtype as contract_amp_dtype, ran_dtype
from harness_contract import measured_default
from harness_node import processor_kind




def resolve_amp(device_type, torch_mod=torch):
    """For --precision amp: (autocast context factory, dtype name,
    needs a gradient scaler).  Raises HarnessError (exit 2) where this
    PyTorch cannot autocast on ``device_type``."""
    dtype = contract_amp_dtype(device_type)
    return (_autocast("amp", device_type, dtype, torch_mod), dtype,
            dtype == "float16")


def _autocast(precision, device_type, dtype_name, torch_mod):
    """A factory of autocast contexts for ``dtype_name`` on the device."""
    autocast = getattr(torch_mod, "autocast", None)
    dtype = getattr(torch_mod, dtype_name, None)
    if autocast is not None and dtype is not None:
        return lambda: autocast(device_type=device_type, dtype=dtype)
    if device_type == "cuda" and dtype_name == "float16":
        cuda_amp = getattr(getattr(torch_mod, "cuda", None), "amp", None)
        legacy = getattr(cuda_amp, "autocast", None)
        if legacy is not None:
            return lambda: legacy()
        raise HarnessError("--precision %s: this PyTorch has no CUDA "
                           "autocast (torch.autocast / torch.cuda.amp)"
                           % precision)
    raise HarnessError("--precision %s: this PyTorch has no %s %s autocast "
                       "(torch.autocast)"
                       % (precision, device_type.upper(), dtype_name))


def set_tf32(enabled, device_type, torch_mod=torch):
    """TensorFloat-32 for CUDA matrix products and cuDNN convolutions: on
    for --precision tf32, off otherwise (fp32 means IEEE fp32, where PyTorch
    would let cuDNN use TF32 by default on Ampere and newer).  The settings
    as set, for the result; {} on a CPU, where TF32 does not exist."""
    if device_type != "cuda":
        return {}
    backends = getattr(torch_mod, "backends", None)
    settings = {}
    for name, holder in (("matmul", getattr(getattr(backends, "cuda", None),
                                            "matmul", None)),
                         ("cudnn", getattr(backends, "cudnn", None))):
        if holder is not None and hasattr(holder, "allow_tf32"):
            holder.allow_tf32 = bool(enabled)
            settings[name] = bool(holder.allow_tf32)
    return settings


def resolve_precision(precision, device_type, torch_mod=torch, kind=None):
    """--precision -> (autocast context factory or None, the type the
    matrix products run in (float32, tf32, float16, bfloat16), needs a
    gradient scaler, TF32 settings as set).  What amp means for the
    workload ``kind`` on this device is the contract's rule
    (harness_contract.amp_dtype).  Raises HarnessError (exit 2) for what this
    device or PyTorch cannot run, never runs another type."""
    if precision == "tf32" and device_type != "cuda":
        raise HarnessError("--precision tf32 is a mode of NVIDIA tensor cores "
                           "(Ampere and newer); this run is on %s"
                           % device_type)
    tf32 = set_tf32(precision == "tf32", device_type, torch_mod)
    if precision in ("fp32", "tf32"):
        return None, "tf32" if precision == "tf32" else "float32", False, tf32
    if precision == "fp16" and device_type != "cuda":
        raise HarnessError("--precision fp16 scales gradients with a CUDA "
                           "gradient scaler; on %s use bf16 or amp"
                           % device_type)
    dtype = ran_dtype(precision, device_type, kind)
    return (_autocast(precision, device_type, dtype, torch_mod), dtype,
            dtype == "float16", tf32)


def make_grad_scaler(torch_mod=torch):
    """A float16 gradient scaler for CUDA, newest API first."""
    amp = getattr(torch_mod, "amp", None)
    scaler_cls = getattr(amp, "GradScaler", None)
    if scaler_cls is not None:
        try:
            return scaler_cls("cuda")
        except TypeError:
            pass
    cuda_amp = getattr(getattr(torch_mod, "cuda", None), "amp", None)
    scaler_cls = getattr(cuda_amp, "GradScaler", None)
    if scaler_cls is not None:
        return scaler_cls()
    raise HarnessError("--precision amp: this PyTorch has no GradScaler")


def resolve_channels_last(mode, precision, device_type, torch_mod=torch):
    """Whether to use channels-last (NHWC) memory format."""
    supported = hasattr(torch_mod, "channels_last")
    if mode == "off":
        return False
    if mode == "on":
        if not supported:
            raise HarnessError("--channels-last on: this PyTorch has no "
                               "torch.channels_last")
        return True
    if device_type == "cuda":
        return supported
    # a CPU: NHWC where it was measured to win on this processor kind
    # (harness_contract.MEASURED_WINS; oneDNN's NHWC kernels), else NCHW
    wanted = measured_default("channels_last", "off", device_type, precision,
                              processor_kind()) == "on"
    return bool(wanted and supported and mkldnn_available(torch_mod))


def maybe_compile(model, requested, torch_mod=torch):
    """(model, compiled): torch.compile(model) when requested and possible."""
    if not requested:
        return model, False
    compile_fn = getattr(torch_mod, "compile", None)
    if compile_fn is None:
        sys.stderr.write("dlrun-harness: warning: --compile: this PyTorch has "
                         "no torch.compile; running eagerly\n")
        return model, False
    return compile_fn(model), True


def mkldnn_available(torch_mod=torch):
    """Whether oneDNN (mkldnn) CPU kernels are available."""
    mkldnn = getattr(getattr(torch_mod, "backends", None), "mkldnn", None)
    is_available = getattr(mkldnn, "is_available", None)
    if is_available is None:
        return False
    try:
        return bool(is_available())
    except Exception:
        return False


def make_adamw(params, lr, weight_decay, fused="off", torch_mod=torch):
    """(optimizer, name, fused): AdamW (decoupled weight decay, as BERT's
    own optimizer) where this PyTorch has it, else Adam, which costs the
    same per step (torch.optim.AdamW is newer than PyTorch 1.0); ``fused``
    as in ``make_optimizer``."""
    adamw = getattr(torch_mod.optim, "AdamW", None)
    if adamw is not None:
        opt, is_fused = make_optimizer(adamw, params, fused, lr=lr,
                                       weight_decay=weight_decay)
        return opt, "adamw", is_fused
    opt, is_fused = make_optimizer(torch_mod.optim.Adam, params, fused,
                                   lr=lr, weight_decay=weight_decay)
    return opt, "adam", is_fused


def make_optimizer(cls, params, mode, **kwargs):
    """(optimizer, fused): ``cls(params, **kwargs)`` with ``fused=True``
    where ``mode`` asks for it and this PyTorch has a fused kernel for the
    parameters' device.  A fused step updates each tensor in one pass
    instead of one pass per arithmetic operation: on CPU AdamW's step alone
    is 4-7x and SGD-with-momentum's 2x cheaper (measured, 1 thread), yet
    the whole training step with the fused SGD lost on every CPU measured,
    so on a CPU auto is PyTorch's default step unless
    harness_contract.MEASURED_WINS says otherwise (on CUDA: fused where it
    exists).  "available" (a tuning trial's, or a tuned on) and auto fall
    back to the default step where the constructor has no ``fused``
    (PyTorch < 2.0) or refuses it (before 2.4 only CUDA tensors could be
    fused); on is then an error (exit 2); off keeps PyTorch's default."""
    params = list(params)
    device = params[0].device.type if params and hasattr(
        params[0], "device") else "cpu"
    if mode == "auto" and device != "cuda":  # a CPU: measured to win, or not
        mode = measured_default("fused_optimizer", "off", device, "fp32",
                                processor_kind())
    if mode != "off":
        try:
            return cls(params, fused=True, **kwargs), True
        except (TypeError, RuntimeError, ValueError) as exc:
            if mode == "on":  # ("available": fused where it exists)
                raise HarnessError("--fused-optimizer on: this PyTorch has "
                                   "no fused %s for these parameters (%s)"
                                   % (cls.__name__, exc))
    return cls(params, **kwargs), False
