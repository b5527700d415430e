"""dlrun PyTorch harness: a Llama-3-style decoder for LLM pretraining, its
configurations and what is counted on it (parameters, FLOPs per token).
Standard library + torch; importable on Python >= 3.6 with PyTorch >= 1.0,
buildable where this PyTorch has
``torch.nn.functional.scaled_dot_product_attention`` (2.0 and newer; an
older release is told so in one line).

The decoder is Llama 3's (Dubey et al., "The Llama 3 Herd of Models",
Sec. 3.2 and Table 3): token embeddings; per layer RMSNorm, grouped-query
attention (``n_kv_heads`` key/value heads shared by ``n_heads`` query
heads) with rotary position embeddings (theta 500,000) and causal masking,
computed by ``scaled_dot_product_attention(is_causal=True)``, a residual,
RMSNorm, a SwiGLU feed-forward layer (w2(silu(w1 x) * w3 x)) and a
residual; a final RMSNorm and the output projection.  No bias anywhere, no
dropout.  Llama 3.1's long-context RoPE frequency scaling is left out: it
changes which frequencies rotate, not what a step costs.  Weights are drawn
from a normal distribution (std 0.02); no checkpoint is read.

Configurations (``LLAMA_CONFIGS``):

* ``llama3_1b``: Llama 3.2 1B as its config.json gives it (hidden 2048,
  16 layers, 32 heads, 8 key/value heads, feed-forward 8192, vocabulary
  128,256, tied input and output embeddings): 1,235,814,400 parameters.
* ``llama3_8b``: Llama 3.1 8B (hidden 4096, 32 layers, 32 heads, 8
  key/value heads, feed-forward 14,336, vocabulary 128,256, untied):
  8,030,261,248 parameters.
* ``llama3_tiny``: the same architecture at 3.4 M parameters (hidden 256,
  4 layers, 8 heads, 4 key/value heads, feed-forward 768, vocabulary 512,
  enough for the harness's byte-level tokenizer), for tests on a CPU.

FLOPs per token (PaLM, Chowdhery et al. 2022, Appendix B): 6 N + 12 L H Q T
with N the parameters that take part in matrix products, L layers, H query
heads, Q the head dimension and T the sequence length.  6 N counts the
forward (2 FLOPs per multiply-add) and the backward (twice the forward) of
every weight; 12 L H Q T the two attention products (q k^T and the
probabilities times v) in the same three passes.  N is every parameter but
the input embedding table, which is looked up, not multiplied; where the
table is tied to the output layer (llama3_1b) it is counted once, for the
output layer.  The RMSNorm weights are in N (0.0003 % of the 1B model's).
The attention term counts the full T x T products, not the causal half,
and recomputation by activation checkpointing is not counted: model FLOPs,
as MFU is defined.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

from harness_common import HarnessError

_SDPA = getattr(F, "scaled_dot_product_attention", None)
_RMS_NORM = getattr(F, "rms_norm", None)
_SILU = getattr(F, "silu", None)

#: name -> configuration (see the notes above for the sources).
LLAMA_CONFIGS = {
    "llama3_tiny": {"dim": 256, "n_layers": 4, "n_heads": 8, "n_kv_heads": 4,
                    "ffn_dim": 768, "vocab_size": 512, "tied": False,
                    "norm_eps": 1e-5, "rope_theta": 500000.0,
                    "seq_length": 256, "lr": 1e-3},
    "llama3_1b": {"dim": 2048, "n_layers": 16, "n_heads": 32,
                  "n_kv_heads": 8, "ffn_dim": 8192, "vocab_size": 128256,
                  "tied": True, "norm_eps": 1e-5, "rope_theta": 500000.0,
                  "seq_length": 8192, "lr": 3e-4},
    "llama3_8b": {"dim": 4096, "n_layers": 32, "n_heads": 32,
                  "n_kv_heads": 8, "ffn_dim": 14336, "vocab_size": 128256,
                  "tied": False, "norm_eps": 1e-5, "rope_theta": 500000.0,
                  "seq_length": 8192, "lr": 3e-4},
}
LLAMA_NAMES = ("llama3_tiny", "llama3_1b", "llama3_8b")
#: AdamW as Llama 3 was trained (Table 3's 8B: peak lr 3e-4; betas and
#: weight decay of Llama 2's recipe, which Llama 3 kept).
ADAMW_BETAS = (0.9, 0.95)
WEIGHT_DECAY = 0.1


def is_llama(name):
    return name in LLAMA_CONFIGS


def llama_config(name, seq_length=None, num_layers=None):
    """The configuration of ``name`` with the sequence length and layer
    count a run asks for (None: the configuration's own)."""
    if name not in LLAMA_CONFIGS:
        raise HarnessError("unknown LLM %r (choose from: %s)"
                           % (name, ", ".join(LLAMA_NAMES)))
    cfg = dict(LLAMA_CONFIGS[name])
    if seq_length is not None:
        cfg["seq_length"] = seq_length
    if num_layers is not None:
        cfg["n_layers"] = num_layers
    cfg["head_dim"] = cfg["dim"] // cfg["n_heads"]
    return cfg


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super(RMSNorm, self).__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        if _RMS_NORM is not None:
            return _RMS_NORM(x, (x.size(-1),), self.weight, self.eps)
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
        return y.type_as(x) * self.weight


def rope_tables(head_dim, seq_length, theta):
    """cos and sin, each (seq_length, head_dim / 2), of the rotary
    embedding's angles position x theta^(-2i / head_dim)."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2).float() / head_dim))
    angles = torch.outer(torch.arange(seq_length).float(), inv)
    return angles.cos(), angles.sin()


def apply_rope(x, cos, sin):
    """Rotate (batch, heads, T, head_dim) by position; the dimensions are
    paired as (i, i + head_dim / 2), as Hugging Face's Llama lays them."""
    half = x.size(-1) // 2
    x1, x2 = x[..., :half], x[..., half:]
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg):
        super(Attention, self).__init__()
        dim, hd = cfg["dim"], cfg["head_dim"]
        self.n_heads, self.n_kv, self.head_dim = (cfg["n_heads"],
                                                  cfg["n_kv_heads"], hd)
        self.wq = nn.Linear(dim, self.n_heads * hd, bias=False)
        self.wk = nn.Linear(dim, self.n_kv * hd, bias=False)
        self.wv = nn.Linear(dim, self.n_kv * hd, bias=False)
        self.wo = nn.Linear(self.n_heads * hd, dim, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, t, self.n_kv, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, t, self.n_kv, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if self.n_kv != self.n_heads:  # grouped-query: share each k/v head
            repeat = self.n_heads // self.n_kv
            k = k.repeat_interleave(repeat, dim=1)
            v = v.repeat_interleave(repeat, dim=1)
        y = _SDPA(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(b, t, -1))


class FeedForward(nn.Module):
    def __init__(self, cfg):
        super(FeedForward, self).__init__()
        self.w1 = nn.Linear(cfg["dim"], cfg["ffn_dim"], bias=False)
        self.w3 = nn.Linear(cfg["dim"], cfg["ffn_dim"], bias=False)
        self.w2 = nn.Linear(cfg["ffn_dim"], cfg["dim"], bias=False)

    def forward(self, x):
        return self.w2(_SILU(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    """One decoder layer; the unit FSDP shards and activation checkpointing
    recomputes."""

    def __init__(self, cfg):
        super(Block, self).__init__()
        self.attention_norm = RMSNorm(cfg["dim"], cfg["norm_eps"])
        self.attention = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg["dim"], cfg["norm_eps"])
        self.feed_forward = FeedForward(cfg)

    def forward(self, x, cos, sin):
        x = x + self.attention(self.attention_norm(x), cos, sin)
        return x + self.feed_forward(self.ffn_norm(x))


class Llama(nn.Module):
    """The decoder: token ids (batch, T) -> logits (batch, T, vocab)."""

    def __init__(self, cfg, checkpointing=False):
        super(Llama, self).__init__()
        self.cfg = cfg
        self.checkpointing = checkpointing
        self.tok_embeddings = nn.Embedding(cfg["vocab_size"], cfg["dim"])
        self.layers = nn.ModuleList([Block(cfg)
                                     for _ in range(cfg["n_layers"])])
        self.norm = RMSNorm(cfg["dim"], cfg["norm_eps"])
        self.output = nn.Linear(cfg["dim"], cfg["vocab_size"], bias=False)
        if cfg["tied"]:
            self.output.weight = self.tok_embeddings.weight
        cos, sin = rope_tables(cfg["head_dim"], cfg["seq_length"],
                               cfg["rope_theta"])
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)

    def shard_units(self):
        """The modules FSDP shards one by one (the root takes the rest)."""
        return list(self.layers)

    def forward(self, tokens):
        t = tokens.size(1)
        cos, sin = self.rope_cos[:t], self.rope_sin[:t]
        x = self.tok_embeddings(tokens)
        for layer in self.layers:
            if self.checkpointing and self.training:
                x = _checkpoint(layer, x, cos, sin)
            else:
                x = layer(x, cos, sin)
        return self.output(self.norm(x))


def _checkpoint(layer, *inputs):
    from torch.utils.checkpoint import checkpoint
    return checkpoint(layer, *inputs, use_reentrant=False)


def check_support(checkpointing=False, torch_mod=torch):
    """One line naming what this PyTorch lacks for the LLM models."""
    functional = torch_mod.nn.functional
    missing = [name for name in ("scaled_dot_product_attention", "silu")
               if getattr(functional, name, None) is None]
    if not hasattr(torch_mod, "outer"):
        missing.append("torch.outer")
    if missing:
        raise HarnessError("the LLM models need %s, which PyTorch %s lacks "
                           "(PyTorch >= 2.0 has them)"
                           % (", ".join(missing), torch_mod.__version__))
    if checkpointing:
        try:
            import inspect
            from torch.utils.checkpoint import checkpoint
            params = inspect.signature(checkpoint).parameters
        except (ImportError, ValueError, TypeError):
            params = {}
        if "use_reentrant" not in params:
            raise HarnessError("--activation-checkpointing needs "
                               "torch.utils.checkpoint with use_reentrant "
                               "(PyTorch >= 1.11), which PyTorch %s lacks"
                               % torch_mod.__version__)


def build_llama(name, seq_length=None, num_layers=None, checkpointing=False):
    check_support(checkpointing)
    return Llama(llama_config(name, seq_length, num_layers), checkpointing)


def matmul_params(model):
    """N of the FLOPs formula: every parameter but the input embedding
    table, unless that table is the output layer's weight too."""
    total = int(sum(p.numel() for p in model.parameters()))
    if model.cfg["tied"]:
        return total
    return total - int(model.tok_embeddings.weight.numel())


def flops_per_token(cfg, n_matmul):
    """Model FLOPs per trained token: 6 N + 12 L H Q T (see the notes)."""
    attention = (12 * cfg["n_layers"] * cfg["n_heads"] * cfg["head_dim"]
                 * cfg["seq_length"])
    return 6 * int(n_matmul) + attention


def meta_llama(name, seq_length=None, num_layers=None):
    """The model built on the meta device (no memory for weights), or on the
    CPU where this PyTorch cannot build on meta."""
    check_support()
    cfg = llama_config(name, seq_length, num_layers)
    if hasattr(torch.device, "__enter__"):
        with torch.device("meta"):
            return Llama(cfg)
    return Llama(cfg)


def describe_llama(name, seq_length=None, num_layers=None):
    """The ``--describe`` record: parameters counted on the built model,
    FLOPs per token, and forward multiply-adds per token (FLOPs / 6)."""
    model = meta_llama(name, seq_length, num_layers)
    cfg = model.cfg
    params = int(sum(p.numel() for p in model.parameters()))
    n_matmul = matmul_params(model)
    flops = flops_per_token(cfg, n_matmul)
    return {
        "model": name, "params": params, "matmul_params": n_matmul,
        "flops_per_token": flops, "forward_macs": flops // 6,
        "forward_macs_per": "token",
        "flops_formula": "6*N + 12*L*H*Q*T (PaLM, Appendix B)",
        "seq_length": cfg["seq_length"], "num_layers": cfg["n_layers"],
        "dim": cfg["dim"], "heads": cfg["n_heads"],
        "kv_heads": cfg["n_kv_heads"], "head_dim": cfg["head_dim"],
        "ffn_dim": cfg["ffn_dim"], "vocab_size": cfg["vocab_size"],
        "tied_embeddings": cfg["tied"],
    }


def lm_loss(logits, targets):
    """Cross entropy of next-token logits (batch, T, vocab) against the
    following tokens (batch, T), averaged over every token."""
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)),
                           targets.reshape(-1))

