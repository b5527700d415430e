#!/usr/bin/env python
"""dlrun in-container PyTorch training benchmark harness.

Image-classification training in the style of tf_cnn_benchmarks (its model
names, log layout and "images/sec"), BERT-base fine-tuning on SWAG or SQuAD
(sequences/sec), or LLM pretraining with a Llama-3-style decoder (tokens/sec,
MFU); it ends with exactly one machine-readable result line.

Copied verbatim into containers, some of them old: it needs only the Python
standard library and torch (Python >= 3.6, PyTorch >= 1.0); newer PyTorch
features are used only behind feature checks (``hasattr``), never versions.

Files
-----
This entry file is shipped together with its siblings in one directory and
imports them from there (it puts its own directory on ``sys.path``; the
caller's working directory does not matter):
``harness_common.py`` (shared with the TensorFlow harness: exit codes,
the error type, output, argument types, throughput statistics),
``harness_ranks.py`` (shared too: rank and world size from the launcher's
variables), ``harness_contract.py`` and ``harness_result_schema.py`` (the
contract with dlrun's launcher: precisions and what each runs as, dataset
formats, rank variables, knobs; the result's typed schema),
``harness_node.py`` (the node: CPU, memory, driver, fabrics), ``harness_pytorch_allocator.py`` (the memory allocator) and
``harness_pytorch_knobs.py`` (the speed knobs and why each has its value;
both standard library only, settled before torch is imported),
``harness_pytorch_features.py`` (checks for features of newer PyTorch
releases), ``harness_pytorch_models.py`` (model definitions and what is
counted on them; ``harness_pytorch_bnrelu.py``, their fused batch norm +
ReLU, ``harness_pytorch_kernel.py``, its C kernel's build),
``harness_pytorch_data.py`` (the data the steps consume), real data in
``harness_pytorch_dataset.py`` and ``harness_pytorch_tfrecord.py``,
``harness_pytorch_process.py`` (ranks, device, backend, versions),
``harness_pytorch_comm.py`` (process group, collectives),
``harness_pytorch_ranktime.py`` (each rank's step: ready, then waiting),
``harness_pytorch_collectives.py`` (the collective benchmarks),
``harness_pytorch_sendrecv.py`` (point-to-point bandwidth), the storage
reader ``harness_pytorch_storage.py`` (run as its own script),
``--dist`` in ``harness_pytorch_horovod.py`` and ``harness_pytorch_fsdp.py``,
``harness_pytorch_llama.py`` (the LLM), ``harness_pytorch_text.py`` (its
tokens), ``harness_pytorch_mfu.py`` (MFU and the peak table),
``harness_pytorch_tasks.py`` (what a step consumes per kind of model),
``harness_pytorch_args.py`` (the options of the newer features),
``harness_pytorch_loader.py`` (the loader-only rate), ``--checkpoint-every``
in ``harness_pytorch_checkpoint.py``,
``harness_pytorch_train.py`` (the training benchmark), ``harness_pytorch_tune.py``
(``dlrun tune``'s trials): each needs only the standard library and torch (the
fused kernel a C compiler) and imports alone without side effects.

Usage
-----
    python harness_pytorch.py --model resnet50_v1.5 --batch-size 64 --steps 100
    python harness_pytorch.py --describe --model vgg16

Options: ``--help`` lists them all with their defaults (newer features':
harness_pytorch_args.py; speed knobs': harness_pytorch_knobs.py).

Models
------
alexnet, resnet18, resnet34, resnet50, resnet101, resnet152,
resnet50_v1.5, resnet101_v1.5, resnet152_v1.5, vgg16, inception3, lenet,
trivial (images, 1000 classes); bert_swag, bert_squad (tokens);
llama3_tiny, llama3_1b, llama3_8b (LLM pretraining).

* ``resnetN`` (N >= 50) is ResNet v1 as in tf_cnn_benchmarks: the stride-2 of
  a downsampling bottleneck block is on its first 1x1 convolution.
  ``resnetN_v1.5`` puts it on the 3x3 convolution (torchvision, NVIDIA,
  MLPerf).  Both have the same parameters; v1.5 costs more multiply-adds.
  resnet18/resnet34 use basic blocks, where v1 and v1.5 coincide.
* ``alexnet`` and ``vgg16`` (configuration D, no batch norm) follow the
  torchvision definitions, including the adaptive average pooling before the
  classifier.  ``inception3`` is torchvision's Inception-v3 without the
  auxiliary head, at 299x299.
* ``lenet`` is tf_cnn_benchmarks' lenet (conv 32 5x5 SAME, maxpool 2,
  conv 64 5x5 SAME, maxpool 2, fc 512, fc classes) on 28x28 inputs with
  3 channels and 1000 classes, i.e. what tf_cnn_benchmarks builds for the
  (synthetic) imagenet data set, not the 1-channel, 10-class MNIST variant.
* ``trivial`` (conv 3->8 3x3, batch norm, global average pool, fc 1000 on
  32x32 inputs) is for smoke tests only; it measures nothing.

* ``bert_swag`` and ``bert_squad`` are BERT-base (uncased vocabulary of
  30522, 12 layers, hidden 768, 12 heads, feed-forward 3072; 109.5 M
  parameters as in Ren et al. Table II) with the heads of the BERT code Ren
  et al. fine-tuned (pytorch-pretrained-BERT): SWAG is multiple choice (each
  example is 4 sequences of at most 80 tokens, a linear layer scores each
  pooled sequence), SQuAD is span extraction (windows of 384 tokens, a linear
  layer gives start and end logits per token; the pooler is built, as there,
  but unused and frozen).  Weights are randomly initialised (normal, std
  0.02); fused GELU and scaled_dot_product_attention are used where this
  PyTorch has them.

* ``llama3_*``: a Llama-3-style decoder (see harness_pytorch_llama.py:
  1,235,814,400 parameters as Llama 3.2 1B, 8,030,261,248 as Llama 3.1
  8B, 3.4 M for CPU tests) trained on next-token prediction with AdamW
  (betas 0.9, 0.95, weight decay 0.1), on synthetic tokens or on
  ``--data-dir``'s corpus or token shards (harness_pytorch_text.py).
  ``--batch-size`` counts sequences per device; rates count tokens:
  world_size x devices per rank x batch x micro-batches x seq_length x
  timed_steps / wall_time_s.  ``--precision amp`` is bfloat16 autocast on
  every device (no gradient scaler).  The result adds flops_per_token
  (6 N + 12 L H Q T, PaLM Appendix B), achieved TFLOP/s and MFU against the
  device's peak and against --matmul-gflops (harness_pytorch_mfu.py; an
  MFU above 1 fails the run, exit 7), first_loss, final_loss and
  loss_fell.

Default input sizes: 3x224x224; inception3 3x299x299; lenet 3x28x28;
trivial 3x32x32; bert_swag 4x80 tokens per example; bert_squad 384 tokens.

Training benchmark
------------------
A fixed random batch of images and integer labels is generated once per rank
(seeded with --seed + rank) and kept on the device, as tf_cnn_benchmarks'
synthetic data; nothing is generated on the critical path, so --data-workers
is accepted (and recorded) but has nothing to do.  With ``--data-dir DIR``
the image models train on real ImageNet data instead - TFRecord shards or a
JPEG ImageFolder tree, decoded and augmented in --data-workers DataLoader
processes (default 4) - and the result adds data_source ("jpeg" or
"tfrecord"; "synthetic" otherwise), data_path, data_images and
images_decoded; see ``harness_pytorch_dataset.py`` (and
``harness_pytorch_tfrecord.py``, which reads TFRecords without TensorFlow).
A directory that is not such a dataset is an error (exit 2), never a
fallback to synthetic data.  Loss is cross entropy,
the optimizer SGD with momentum.  BERT: random token ids (token type 0 for
the first half of a sequence, 1 for the rest, no padding), the right ending
(SWAG) or the answer's start and end token (SQuAD) as targets, loss cross
entropy (SQuAD: the mean of start and end), the optimizer AdamW with weight
decay 0.01 (Adam where torch.optim.AdamW does not exist), as BERT's own.
--batch-size counts instances: SWAG examples (of 4 sequences each, as Ren et
al.'s batch sizes do) or SQuAD windows; rates count sequences.

* ``--precision``: fp32 (TF32 off), tf32 and fp16 (CUDA), bf16, amp (bf16
  on CPU, fp16 + scaler on CUDA); resolve_precision in
  harness_pytorch_features.py; the result records what ran.
* ``--channels-last auto``: on for CUDA; on a CPU (oneDNN) where NHWC was
  measured to win on this processor kind and precision (MEASURED_WINS in
  harness_contract.py), else off; ``on`` fails (exit 2) where unsupported.
* ``--compile`` (on) uses torch.compile where it exists, else warns and
  runs eagerly (result: ``compiled``; the untimed warm-up's seconds, where
  compiling happens, ``warmup_time_s``).  ``--pin-threads on`` binds each
  OpenMP thread to one CPU of this rank's share (OMP_PROC_BIND,
  OMP_PLACES; before torch loads, not where the user set them);
  ``--cudnn-benchmark off`` takes cuDNN's heuristics (CUDA only).
* ``knobs`` in the result: every speed knob's value (allocator,
  fused_optimizer, fused_bn_relu, channels_last, threads, pin_threads,
  compile, cudnn_benchmark) and why: asked for, tuned or default
  (``harness_pytorch_knobs.py``).
* ``--fused-optimizer auto`` (default) gives SGD and AdamW ``fused=True``
  on CUDA where this PyTorch has a fused step; on a CPU only where it was
  measured to win on this processor kind (nowhere yet: the fused SGD step
  lost on every CPU measured), else PyTorch's default step; ``on`` fails
  (exit 2) where there is none, ``off`` keeps the default step.
* ``--fused-bn-relu auto`` (default): ResNets' batch norm + ReLU in fp32
  channels-last CPU training through one kernel (harness_pytorch_bnrelu.py
  says why), where it builds and was measured to win on this processor
  kind; ``on`` fails (exit 2) where it cannot run, ``off``: PyTorch's ops.

Memory allocator (``--allocator``, default auto; harness_pytorch_allocator.py
says why): run as a program, the harness re-executes itself once, before
importing torch, with tcmalloc (libtcmalloc_minimal.so.4), else jemalloc
(libjemalloc.so.2), in LD_PRELOAD, else tells glibc through mallopt to keep
freed memory ("glibc-tuned"); ``system`` leaves malloc as it is.  A named
allocator that cannot be loaded is an error (exit 2); children inherit the
original LD_PRELOAD; imported as a module, auto means glibc-tuned.

Rank, world size and local rank come from the environment, first match wins:
torchrun (RANK, WORLD_SIZE, LOCAL_RANK); Open MPI (OMPI_COMM_WORLD_RANK,
OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK); PMIx (PMIX_RANK, size
from OMPI_COMM_WORLD_SIZE or SLURM_NTASKS); Slurm (SLURM_PROCID,
SLURM_NTASKS, SLURM_LOCALID); otherwise one process.  With more than one
process the process group is initialised with
``init_method="tcp://MASTER_ADDR:MASTER_PORT"`` (defaults 127.0.0.1 and
29500; the mpi backend needs no rendezvous) and the model is wrapped in
DistributedDataParallel.  Backend auto is nccl on CUDA and gloo on CPU.

``--dist horovod`` (training only) uses Horovod instead of a process group
(see ``harness_pytorch_horovod.py``); the output contract is the same, and
results record ``dist`` ("ddp", "horovod", "fsdp" or "dataparallel") and
``horovod_version``.  ``--dist fsdp`` shards the model with FSDP2 and
``--dist dataparallel`` runs one process over the node's GPUs, or the
first ``--dataparallel-gpus N`` (``harness_pytorch_fsdp.py``, with the
replica check for sharded
parameters).  Every trained model takes ``--global-batch-size`` (gradient
accumulation), ``--checkpoint-every`` (harness_pytorch_checkpoint.py) and
records the data-stall seconds of the timed steps and the loader-only rate
(harness_pytorch_loader.py).

Timing: warm-up steps are excluded.  Before the timed loop every rank waits at
a barrier and synchronises its device; every timed step ends with a device
synchronisation (as tf_cnn_benchmarks' per-step session.run), so per-step
times are real.  Each rank's wall time is that of its whole timed loop.
Rate of one rank = batch_size_per_rank * timed_steps / its wall time; the
total is ``world_size*batch_size_per_rank*timed_steps/wall_time_s`` (BERT:
times sequences_per_instance, 4 for SWAG, 1 for SQuAD) where
``wall_time_s`` is the MAXIMUM wall time over ranks (conservative).  The
per-step log rows show the global rate estimated from rank 0's step times
(world_size * batch / mean step time, +/- the standard error, jitter = 1.4826
* median absolute deviation), as tf_cnn_benchmarks prints them.

Output: rank 0 writes a tf_cnn_benchmarks-like log to stdout, ending with
"total images/sec: N" and then exactly one line ``DLRUN_RESULT {json}``
(json.dumps with sort_keys); its fields are listed in
``harness_pytorch_process.py``.

With more than one rank, a float64 checksum (sum and sum of absolute values)
of all parameters is compared across ranks at the end (all-reduce MAX and
MIN, relative tolerance 1e-6 of the absolute sum); any difference is reported
as "replicas diverged" (exit 4, no result line).

Errors are one stderr line starting with ``dlrun-harness: error:`` (an
unexpected exception also prints its traceback before that line); a fatal
signal's, the Python stacks (faulthandler).  Ends: harness_pytorch_comm.leave.  Exit
codes: 0 ok; 1 unexpected failure; 2 bad option or unsupported feature;
3 world size differs from --expected-world-size; 4 replicas diverged;
6 a collective returned wrong values (--benchmark COLLECTIVE); 7 a number
that cannot be (an MFU above 1);
5 non-finite loss (one process: checked at every displayed step; several:
checked at the end, all ranks agreeing through an all-reduce).

Test hook: if DLRUN_HARNESS_TEST_PERTURB_RANK=R is set, rank R adds 1.0 to
its first parameter tensor after training, before the replica check (with
--benchmark allreduce: adds 1.0 to the first element it contributes to each
checked all-reduce), so that tests can prove the checks fire.  It has no
other effect.  With --dist horovod, DLRUN_HARNESS_TEST_HOROVOD_NO_WRAP=1
leaves the optimizer unwrapped (no gradient averaging), so that tests can
prove the replica check catches ranks that do not average.
DLRUN_HARNESS_TEST_CPUINFO=PATH reads PATH instead of /proc/cpuinfo
(whether the CPU has bfloat16 instructions).

All-reduce benchmark (``--benchmark allreduce``, at least 2 ranks): for each
message size from --min-bytes to --max-bytes (x --size-factor; float32
elements), --warmup-steps untimed and --steps timed in-place sum
all-reduces of a zero buffer over the process group (gloo on CPU, NCCL on
CUDA), then one check all-reduce where rank r contributes r + 1 (every
element must come back n (n + 1) / 2; any wrong element: exit 6).  Time
per size = the slowest rank's mean per all-reduce; algbw = bytes / time and
busbw = algbw * 2 (n - 1) / n in GB/s (nccl-tests' definitions).  Rank 0
prints an nccl-tests-like table and a DLRUN_RESULT with metric "busbw",
value = busbw at the largest size, unit "GB/s", avg_busbw, and every size
in "sizes" (bytes, count, time_us, algbw_gbs, busbw_gbs, wrong).

Collective benchmarks (``--benchmark broadcast|allgather|reducescatter|
alltoall``, and allreduce above; harness_pytorch_collectives.py): the same
sweep, table and result for each collective, with nccl-tests' sizes and
bus-bandwidth factors (all-reduce 2 (n - 1) / n; all-gather, reduce-scatter
and all-to-all (n - 1) / n, their size being the whole buffer over all
ranks; broadcast 1, root 0).  Every size is checked once on deterministic
per-rank inputs against exact expected values.  The result adds
"collective" (nccl-tests' name, e.g. all_gather), "api" (the
torch.distributed function used, e.g. reduce_scatter_single), "busbw_factor",
"size_is" and "root".  A collective this PyTorch or backend lacks fails with
one line (exit 2).  ``--benchmark sendrecv`` measures point-to-point
bandwidth of every pair of ranks in both directions
(harness_pytorch_sendrecv.py).
"""

import faulthandler
import os
import sys

# The siblings live next to this file, wherever it was started from.
HARNESS_DIR = os.path.dirname(os.path.realpath(__file__))
if HARNESS_DIR not in sys.path:
    sys.path.insert(0, HARNESS_DIR)

# Standard library only: torch is not imported yet.
from harness_pytorch_allocator import (argv_allocator,  # noqa: E402
                                       setup_allocator)
from harness_pytorch_knobs import add_knob_options, pin_threads  # noqa: E402

if __name__ == "__main__":
    faulthandler.enable()  # SIGABRT, SIGSEGV: the stacks for the failure reason
    _requested = argv_allocator(sys.argv[1:])
    if _requested is not None:
        try:
            setup_allocator(_requested, allow_exec=True)
        except Exception as _exc:
            sys.stderr.write("dlrun-harness: error: %s\n"
                             % getattr(_exc, "message", _exc))
            sys.exit(getattr(_exc, "code", 1))
        pin_threads(sys.argv[1:])  # OpenMP reads it when torch loads it

import json  # noqa: E402

from harness_pytorch_collectives import (  # noqa: E402 (imports torch)
    add_collective_options, run_communication)
from harness_common import (EXIT_USAGE, ArgumentParser,  # noqa: E402
                            HarnessError, error_line, non_negative, out,
                            positive, report_failures)
from harness_pytorch_comm import leave  # noqa: E402
from harness_contract import DEFAULT_PRECISION, PRECISIONS  # noqa: E402

DEVICES = ("auto", "cpu", "cuda")
BACKENDS = ("auto", "gloo", "nccl", "mpi")
from harness_pytorch_args import (add_llm_options,  # noqa: E402
                                  add_training_options)
from harness_pytorch_horovod import DIST_CHOICES  # noqa: E402
from harness_pytorch_knobs import trial_spec  # noqa: E402
from harness_pytorch_models import MODEL_NAMES, describe_model  # noqa: E402
from harness_pytorch_train import run_benchmark  # noqa: E402


DEFAULT_DATA_WORKERS = 4  # Ren et al.'s j (Sec. IV)


def build_parser():
    p = ArgumentParser(
        prog="dlrun-harness",
        description="PyTorch training benchmark (tf_cnn_benchmarks-style; "
                    "CNNs, BERT and LLM pretraining) and collective "
                    "benchmarks.")
    p.add_argument("--model", default="resnet50_v1.5", choices=MODEL_NAMES)
    p.add_argument("--describe", action="store_true",
                   help="print the model's parameters and forward "
                        "multiply-adds as one JSON line and exit")
    p.add_argument("--batch-size", type=positive, default=32,
                   help="instances per device and micro-batch: images, "
                        "BERT examples or windows, LLM sequences (default 32)")
    p.add_argument("--steps", type=positive, default=100,
                   help="timed steps (default 100)")
    p.add_argument("--warmup-steps", type=non_negative, default=10,
                   help="untimed warm-up steps (default 10)")
    p.add_argument("--precision", choices=PRECISIONS,
                   default=DEFAULT_PRECISION)
    p.add_argument("--device", choices=DEVICES, default="auto")
    p.add_argument("--threads", type=positive, default=None,
                   help="torch.set_num_threads (default: torch's choice)")
    p.add_argument("--expected-world-size", type=positive, default=None)
    p.add_argument("--backend", choices=BACKENDS, default="auto")
    p.add_argument("--dist", choices=DIST_CHOICES, default="ddp",
                   help="distribution layer (training): ddp "
                        "(DistributedDataParallel, default), horovod "
                        "(Horovod's DistributedOptimizer), fsdp (FSDP2 "
                        "fully_shard) or dataparallel (one process, "
                        "torch.nn.DataParallel over the node's GPUs)")
    p.add_argument("--dataparallel-gpus", type=positive, default=None,
                   help="--dist dataparallel: GPUs to spread the batch "
                        "over, the first N visible (default: all)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--display-every", type=positive, default=10)
    p.add_argument("--lr", type=float, default=None,
                   help="learning rate (default 0.01 for the CNNs' SGD, 5e-5 "
                        "for BERT's AdamW)")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seq-length", type=positive, default=None,
                   help="BERT and LLMs: tokens per sequence (default: the "
                        "task's maximum, 80 for SWAG, 384 for SQuAD; the "
                        "LLM's own, 8192 for llama3_1b/8b)")
    p.add_argument("--num-layers", type=positive, default=None,
                   help="BERT and LLMs: transformer layers (default: the "
                        "model's own, 12 for BERT-base)")
    p.add_argument("--data-dir", default=None,
                   help="train on this directory instead of synthetic data: "
                        "ImageNet (TFRecord shards or a JPEG ImageFolder "
                        "tree) for the image models; token shards (.bin), "
                        "JSON lines or plain text for the LLMs")
    p.add_argument("--data-workers", type=non_negative, default=None,
                   help="DataLoader worker processes per rank decoding "
                        "--data-dir (default 4; 0 decodes in the training "
                        "process); recorded only for synthetic data")
    add_knob_options(p)
    add_collective_options(p)
    add_training_options(p)
    add_llm_options(p)
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    args.raw_argv = list(sys.argv[1:] if argv is None else argv)
    if args.data_workers is None:  # the LLM reads its windows in-process
        args.data_workers = (DEFAULT_DATA_WORKERS if args.data_dir
                             and not args.model.startswith("llama") else 0)
    if args.data_dir is not None and (args.model.startswith("bert")
                                      or args.benchmark != "train"):
        error_line("--data-dir: %s reads no images; valid: an image model"
                   % (args.model if args.benchmark == "train"
                      else "--benchmark allreduce"))
        return EXIT_USAGE
    return report_failures(lambda: _run(args))


def _run(args):
    if args.describe:
        out(json.dumps(describe_model(args.model), sort_keys=True))
        return 0
    if args.benchmark != "train":
        if args.dist != "ddp":
            raise HarnessError("--dist %s applies to training; the "
                               "collective benchmarks use the process "
                               "group; valid: --dist ddp" % args.dist)
        return run_communication(args)
    spec = trial_spec()
    if spec is not None:  # dlrun tune's trial, not a benchmark
        from harness_pytorch_tune import run_trial
        return run_trial(args, spec)
    return run_benchmark(args)


if __name__ == "__main__":
    leave(main())
