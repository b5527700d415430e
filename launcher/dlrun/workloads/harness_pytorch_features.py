"""dlrun PyTorch harness: feature checks for old PyTorch releases.  Newer
features are used only where this PyTorch has them (``hasattr``-style checks,
never version comparisons); ``torch_mod`` is replaceable so that tests can
present an old release.  Standard library + torch; runs on Python >= 3.6
with PyTorch >= 1.0.
"""

import sys

import torch

from harness_common import HarnessError


def resolve_amp(device_type, torch_mod=torch, bf16=False):
    """For --precision amp: (autocast context factory, dtype name,
    needs a gradient scaler).  Raises HarnessError (exit 2) where this
    PyTorch cannot autocast on ``device_type``.  ``bf16``: bfloat16 on
    CUDA too (the LLMs train in it, without a scaler), else float16."""
    autocast = getattr(torch_mod, "autocast", None)
    if device_type == "cuda" and bf16:
        dtype = getattr(torch_mod, "bfloat16", None)
        supported = getattr(torch_mod.cuda, "is_bf16_supported", None)
        if autocast is None or dtype is None or supported is None \
                or not supported():
            raise HarnessError("--precision amp: the LLMs autocast to "
                               "bfloat16, which this GPU or PyTorch cannot")
        return (lambda: autocast(device_type="cuda", dtype=dtype),
                "bfloat16", False)
    if device_type == "cuda":
        dtype = getattr(torch_mod, "float16", None)
        if autocast is not None and dtype is not None:
            return (lambda: autocast(device_type="cuda", dtype=dtype),
                    "float16", True)
        cuda_amp = getattr(getattr(torch_mod, "cuda", None), "amp", None)
        legacy = getattr(cuda_amp, "autocast", None)
        if legacy is not None:
            return (lambda: legacy(), "float16", True)
        raise HarnessError("--precision amp: this PyTorch has no CUDA "
                           "autocast (torch.autocast / torch.cuda.amp)")
    dtype = getattr(torch_mod, "bfloat16", None)
    if autocast is None or dtype is None:
        raise HarnessError("--precision amp: this PyTorch has no CPU bfloat16 "
                           "autocast (torch.autocast)")
    return (lambda: autocast(device_type="cpu", dtype=dtype), "bfloat16",
            False)


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
    wanted = (device_type == "cuda" or precision == "amp"
              or mkldnn_available(torch_mod))
    return bool(wanted and supported)


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
    where ``mode`` is auto or on and this PyTorch has a fused kernel for
    the parameters' device.  A fused step updates each tensor in one pass
    instead of one pass per arithmetic operation: on CPU AdamW's step is
    4-7x and SGD-with-momentum's 2x cheaper (measured, 1 thread), which
    matters for BERT's 110 M parameters.  auto falls back to PyTorch's
    default step where the constructor has no ``fused`` (PyTorch < 2.0) or
    refuses it (before 2.4 only CUDA tensors could be fused); on is then an
    error (exit 2); off keeps PyTorch's default."""
    params = list(params)
    if mode != "off":
        try:
            return cls(params, fused=True, **kwargs), True
        except (TypeError, RuntimeError, ValueError) as exc:
            if mode == "on":
                raise HarnessError("--fused-optimizer on: this PyTorch has "
                                   "no fused %s for these parameters (%s)"
                                   % (cls.__name__, exc))
    return cls(params, **kwargs), False
