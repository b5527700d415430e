"""dlrun PyTorch harness: the command-line options of the features beside
the original training benchmark - LLM pretraining, gradient accumulation,
checkpoints and the loader-only rate.  Standard library only; runs on
Python >= 3.6.
"""

import argparse

from harness_common import non_negative, positive


def _positive_float(text):
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError("must be a positive number, got %s"
                                         % text)
    return value


def add_training_options(p):
    """Options every trained model takes (accumulation, checkpoints, the
    loader-only rate)."""
    p.add_argument("--global-batch-size", type=positive, default=None,
                   help="instances per optimizer step over all devices: "
                        "a multiple of --batch-size x devices, the rest is "
                        "gradient accumulation (default: no accumulation)")
    p.add_argument("--checkpoint-every", type=positive, default=None,
                   help="save the model and optimizer state after every "
                        "N-th timed step (needs --checkpoint-dir); seconds "
                        "and GB/s are recorded")
    p.add_argument("--checkpoint-dir", default=None,
                   help="where --checkpoint-every writes (step-N/; only the "
                        "newest is kept)")
    p.add_argument("--loader-steps", type=non_negative, default=10,
                   help="batches timed from the data source alone before "
                        "the warm-up, for the loader-only rate (default 10; "
                        "0: not measured)")


def add_llm_options(p):
    """Options of the LLM models (llama3_*)."""
    p.add_argument("--activation-checkpointing", action="store_true",
                   help="LLMs: recompute each decoder layer in the backward "
                        "instead of keeping its activations")
    p.add_argument("--matmul-gflops", type=_positive_float, default=None,
                   help="LLMs: the measured matrix-multiply ceiling "
                        "(GFLOP/s per GPU, per node on CPUs) MFU is also "
                        "given against (dlrun: the stored dlrun measure "
                        "matmul rate)")
    p.add_argument("--token-dtype", choices=("auto", "uint16", "uint32"),
                   default=None,
                   help="LLMs: the token type of headerless (nanoGPT) .bin "
                        "shards (default uint16; Megatron .idx and llm.c "
                        "headers say their own)")
    p.add_argument("--max-corpus-bytes", type=positive, default=1 << 30,
                   help="LLMs: the most bytes of text (.txt, .jsonl) read "
                        "and tokenised into memory (default 1 GiB)")
