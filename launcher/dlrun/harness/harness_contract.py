"""The contract between dlrun's launcher and its in-container harness,
every fact both sides need declared once: the precisions and what each
runs as; the dataset formats and how each is recognised; the rank variables
of every launcher in the one order they are read; and, in its sibling
harness_result_schema.py, the typed schema of the ``DLRUN_RESULT {json}``
line.

The launcher imports it as ``dlrun.harness.harness_contract``, the harness
in an image as ``harness_contract``.  Standard library only; imports no
other harness file; runs on Python >= 3.6.
"""

import re

CONTRACT_VERSION = "1"

# --- Precisions -------------------------------------------------------------

#: --precision: IEEE fp32 (TF32 off), TensorFloat-32 (NVIDIA tensor cores),
#: float16 autocast with a gradient scaler, bfloat16 autocast, and amp: the
#: device's own mixed precision (see amp_dtype).
PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "amp")
DEFAULT_PRECISION = "fp32"
#: The precisions only a GPU runs (TF32 tensor cores; a CUDA gradient scaler).
GPU_ONLY_PRECISIONS = ("tf32", "fp16")
#: The element type the matrix products run in, per fixed precision.
DTYPES = {"fp32": "float32", "tf32": "tf32", "fp16": "float16",
          "bf16": "bfloat16"}
#: The precision that names an element type (the inverse of DTYPES).
PRECISION_OF_DTYPE = dict((dtype, name) for name, dtype in DTYPES.items())
#: What each benchmark code can train in: dlrun's PyTorch harness all of
#: them, its TensorFlow 2 harness Keras' mixed_bfloat16 policy,
#: tf_cnn_benchmarks --use_fp16.
CODE_PRECISIONS = {"pytorch": PRECISIONS,
                   "tensorflow": ("fp32", "bf16", "amp"),
                   "tf_cnn_benchmarks": ("fp32", "fp16", "amp")}
LLM_KIND = "llm-pretraining"


def amp_dtype(device, kind=None, code="pytorch"):
    """What ``--precision amp`` computes in - the one rule: the TensorFlow 2
    harness's mixed_bfloat16 policy is bfloat16 everywhere, tf_cnn_benchmarks'
    --use_fp16 float16; dlrun's PyTorch harness trains LLMs (``kind``
    llm-pretraining) in bfloat16 on every device, and everything else in
    float16 (with a gradient scaler) on a CUDA GPU, bfloat16 on a CPU."""
    if code == "tensorflow":
        return "bfloat16"
    if code == "tf_cnn_benchmarks":
        return "float16"
    if kind == LLM_KIND:
        return "bfloat16"
    return "float16" if device == "cuda" else "bfloat16"


def ran_dtype(precision, device, kind=None, code="pytorch"):
    """The element type a run's matrix products compute in."""
    if precision == "amp":
        return amp_dtype(device, kind, code)
    return DTYPES[precision]


def ceiling_precision(precision, device, kind=None, code="pytorch"):
    """The fixed precision whose matrix-multiply rate is a run's ceiling
    (amp: the type it really computes in; tf32 counts as fp32 off a GPU)."""
    return PRECISION_OF_DTYPE[ran_dtype(precision, device, kind, code)]


def precision_label(precision, dtype):
    """How a run's precision is named in its comparability key: ``amp``
    with the type it ran, ``amp(bfloat16)``; the fixed ones as they are."""
    if precision == "amp" and dtype:
        return "amp(%s)" % dtype
    return precision


def split_precision_label(label):
    """(precision asked for, the type amp ran or None) of precision_label."""
    text = str(label)
    if "(" in text and text.endswith(")"):
        name, _, dtype = text[:-1].partition("(")
        return name, dtype or None
    return text, None


# --- Datasets ---------------------------------------------------------------

#: ImageNet's TFRecord shard names, as its build scripts write them:
#: train-00000-of-01024, validation-00000-of-00128.
TFRECORD_SHARD = re.compile(
    r"^(?P<split>train|validation)-(?P<index>\d{5})-of-(?P<count>\d{5})$")
#: The split the harness trains on.
TRAIN_SPLIT = "train"
#: Image files of a JPEG ImageFolder tree (train/<class>/*.JPEG or
#: <class>/*.JPEG), any case.
IMAGE_SUFFIXES = (".jpeg", ".jpg", ".png", ".bmp", ".ppm", ".webp")
#: --data's formats (what `data_source` records): shards, an image tree.
DATASET_FORMATS = ("tfrecord", "jpeg")


def tfrecord_split(name):
    """The split ("train", "validation") of a shard file name, else None."""
    match = TFRECORD_SHARD.match(name)
    return match.group("split") if match else None


def is_image_file(name):
    return name.lower().endswith(IMAGE_SUFFIXES)


# --- Ranks ------------------------------------------------------------------

#: (source, rank variable, size variable, local-rank variables), in the
#: order they are read: the first row whose rank and size variables are both
#: set wins.  torchrun (and jsrun through dlrun's wrapper, JSM_* handed on
#: as RANK...), Open MPI's mpirun (and horovodrun over it), horovodrun's
#: gloo controller, a PMIx server (Open MPI's, or srun --mpi=pmix), MPICH's
#: Hydra (Intel MPI, MVAPICH2: PMI-1/2), IBM's jsrun, Slurm's srun.  Open
#: MPI before Slurm: ranks mpirun starts inside a Slurm allocation inherit
#: the batch step's SLURM_PROCID.
RANK_SOURCES = (
    ("torchrun", "RANK", "WORLD_SIZE", ("LOCAL_RANK",)),
    ("openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
     ("OMPI_COMM_WORLD_LOCAL_RANK",)),
    ("horovod", "HOROVOD_RANK", "HOROVOD_SIZE", ("HOROVOD_LOCAL_RANK",)),
    ("pmix", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE",
     ("OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID")),
    ("pmix", "PMIX_RANK", "SLURM_NTASKS",
     ("OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID")),
    ("mpich", "PMI_RANK", "PMI_SIZE", ("MPI_LOCALRANKID",)),
    ("jsrun", "JSM_NAMESPACE_RANK", "JSM_NAMESPACE_SIZE",
     ("JSM_NAMESPACE_LOCAL_RANK",)),
    ("slurm", "SLURM_PROCID", "SLURM_NTASKS", ("SLURM_LOCALID",)),
)


def _unique(names):
    seen = []
    for name in names:
        if name not in seen:
            seen.append(name)
    return seen


def rank_variables():
    """The rank variables in the order they are read."""
    return _unique(row[1] for row in RANK_SOURCES)


def local_rank_variables():
    return _unique(name for row in RANK_SOURCES for name in row[3])


def shell_first_set(names, default="0"):
    """``${A:-${B:-...:-DEFAULT}}``: the first of ``names`` that is set."""
    text = default
    for name in reversed(list(names)):
        text = "${%s:-%s}" % (name, text)
    return text


# --- Speed knobs ------------------------------------------------------------

#: The PyTorch harness's speed knobs, in the order a result records them.
KNOBS = ("allocator", "fused_optimizer", "fused_bn_relu", "channels_last",
         "threads", "pin_threads", "compile", "cudnn_benchmark")
#: Where a knob's value came from: the user, dlrun's tuner, nobody.
KNOB_SOURCES = ("asked for", "tuned", "default")
#: How the launcher tells the harness each knob's source:
#: "threads=default,allocator=tuned,fused_optimizer=asked".
KNOB_SOURCES_ENV = "DLRUN_KNOB_SOURCES"
#: A tuning trial's variants to time (JSON), for harness_pytorch_tune.py.
TUNE_TRIAL_ENV = "DLRUN_TUNE_TRIAL"
#: The knobs that change which code computes a step, with their reference
#: value - PyTorch's own ops in PyTorch's default layout, eagerly.  Runs
#: whose code paths differ are different configurations (the key's
#: code_path); the others (allocator, threads, pinning, cuDNN's search)
#: place the same computation differently.
CODE_PATH_KNOBS = (("fused_optimizer", "off"), ("fused_bn_relu", "off"),
                   ("channels_last", "off"), ("compile", "off"))


#: Where a code-path knob's value other than its reference was measured to
#: win, so that ``auto`` (the tuner off, or a knob it leaves alone) means that
#: value there and the reference value on every other processor kind: a
#: default never loses where it was measured, and is not guessed where it was
#: not (bench/RESULTS.md holds each measurement).  Each entry: (knob, value,
#: device, precisions, processor kinds: (vendor, CPU family, model), model
#: None for every model of the family).  CPUs only: on CUDA the defaults
#: are as before (channels-last, the fused step, cuDNN's search).
MEASURED_WINS = (
    # ResNet-50 fp32 NHWC/NCHW: Zen 5 1.18-1.33x (2026-11-21); Zen 4 7.30
    # vs 5.91 img/s, benchmark 13's screening (2026-11-27)
    ("channels_last", "on", "cpu", ("fp32",),
     (("AuthenticAMD", 26, None), ("AuthenticAMD", 25, 17))),
    # the fused batch norm + ReLU: Zen 5 1.018-1.026x in one process, 1.025
    # over ten processes (2026-11-27); Zen 4 1.006 and 1.000, no win
    ("fused_bn_relu", "on", "cpu", ("fp32",), (("AuthenticAMD", 26, None),)),
    # (the fused SGD step lost wherever it was measured: Zen 5 0.935-1.001,
    # Zen 4 0.983-0.995, Intel Xeon 0.866-1.009; fused AdamW's whole-step
    # gain was not decided: 0.95-1.05x in CPU seconds)
)


def measured_default(knob, reference, device, precision, kind):
    """What ``auto`` means for code-path knob ``knob`` on this device,
    precision and processor kind ((vendor, family, model), as
    harness_node.processor_kind reads it, or None): the value MEASURED_WINS
    holds for them, else ``reference``."""
    for name, value, on, precisions, kinds in MEASURED_WINS:
        if (name, on) != (knob, device) or precision not in precisions:
            continue
        if kind is not None and any(
                (vendor, family) == kind[:2] and model in (None, kind[2])
                for vendor, family, model in kinds):
            return value
    return reference


def knob_sources_text(sources):
    """The KNOB_SOURCES_ENV value of {knob: source}."""
    return ",".join("%s=%s" % (name, "asked" if source == "asked for"
                               else source)
                    for name, source in sorted(sources.items()))


def parse_knob_sources(text):
    """{knob: source} of a KNOB_SOURCES_ENV value; unknown names and
    sources are left out ("asked" stands for "asked for")."""
    sources = {}
    for item in (text or "").split(","):
        name, _, source = item.partition("=")
        name, source = name.strip(), source.strip()
        source = "asked for" if source == "asked" else source
        if name in KNOBS and source in KNOB_SOURCES:
            sources[name] = source
    return sources


def code_path(knobs):
    """A run's code path from its recorded knobs ({knob: {"value": ...}}):
    "reference", or the knobs off their reference value ("channels_last=on
    fused_bn_relu=on"); None where a code-path knob is not recorded."""
    moved = []
    for name, reference in CODE_PATH_KNOBS:
        entry = (knobs or {}).get(name)
        if not isinstance(entry, dict) or "value" not in entry:
            return None
        value = str(entry["value"])
        if value not in (reference, "n/a"):
            moved.append("%s=%s" % (name, value))
    return " ".join(sorted(moved)) or "reference"
