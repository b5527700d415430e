"""The typed schema of the harness's ``DLRUN_RESULT {json}`` line, the
result half of dlrun's launcher/harness contract (harness_contract.py holds
the rest): every field's type, unit, the result kinds that require it, and
whether it decides the comparability key.  The harness checks its record
before printing it (a record that breaks the schema fails the run with one
line); the launcher's parser checks what it reads.

The launcher imports it as ``dlrun.harness.harness_result_schema``, the
harness in an image as ``harness_result_schema``.  Standard library only;
imports no other harness file; runs on Python >= 3.6.
"""

import math
from collections import namedtuple

#: What starts the result line; the JSON object follows on the same line.
RESULT_PREFIX = "DLRUN_RESULT "

#: One field of the DLRUN_RESULT record.  type: str, int, number, bool,
#: list, object or any, "?" where a required field may be null; unit: what a number is
#: measured in ("result": the record's own `unit`); required: the result
#: kinds that must carry it; key: whether the field decides the
#: comparability key (dlrun.results.key reads it).
Field = namedtuple("Field", "name type unit required key doc")

TRAINING, COLLECTIVE, STORAGE = "training", "collective", "storage"
RESULT_KINDS = (TRAINING, COLLECTIVE, STORAGE)
#: The metric of each result kind.
KIND_OF_METRIC = {"throughput": TRAINING, "busbw": COLLECTIVE,
                  "read_bandwidth": STORAGE, "file_read_rate": STORAGE}
#: The `required` column: t training, c collective, s storage, tc both of
#: the first two, all every kind, - none.
_REQUIRED = {"all": RESULT_KINDS, "tc": (TRAINING, COLLECTIVE),
             "t": (TRAINING,), "c": (COLLECTIVE,), "s": (STORAGE,), "-": ()}

# name                     type    unit      req key what it is
_SCHEMA = """
metric                     str     -         all key throughput, busbw, read_bandwidth, file_read_rate
value                      number  result    tc  -   the figure of merit
unit                       str     -         all -   the value's unit
value_is                   str     -         -   -   which printed figure the value is
formula                    str     -         tc  -   how the value is computed
status                     str     -         tc  -   ok
harness_version            str     -         tc  -   the harness's version
world_size                 int     -         all key processes
num_devices                int     -         all key devices that did the work
devices_per_rank           int     -         -   -   GPUs one process drives
rank_source                str     -         -   -   launcher variables the rank came from
device                     str     -         tc  -   cpu or cuda
device_name                str     -         -   -   the device's model name
threads                    int     -         -   -   CPU threads per rank
pinned_cpus                list?   -         -   -   the CPUs each thread was bound to
node                       object  -         -   key the node it ran on (node_facts)
quality                    object  -         -   -   what decides if the number means anything
framework                  str     -         tc  key pytorch or tensorflow
framework_version          str     -         tc  key the framework's version
python_version             str     -         -   -   the interpreter's version
python                     str     -         -   -   the interpreter's version (storage reader)
cuda_version               str     -         -   key CUDA the framework was built with
cudnn_version              str     -         -   key cuDNN the framework loaded
nccl_version               str     -         -   key NCCL the framework loaded
keras_version              str     -         -   -   Keras (TensorFlow 2 harness)
horovod_version            str?    -         -   key Horovod, where it averaged gradients
mkldnn                     bool    -         -   -   whether PyTorch has oneDNN
allocator                  str     -         -   -   tcmalloc, jemalloc, glibc-tuned or system
allocator_library          str?    -         -   -   the allocator's library file
backend                    str     -         -   key process group backend (none: one process)
dist                       str     -         -   key ddp, horovod, fsdp or dataparallel
model                      str     -         t   key the model trained
model_source               str     -         -   -   where the model definition comes from
params                     int     -         -   -   trainable parameters
precision                  str     -         t   key the precision asked for
precision_ran              str     -         t   -   the precision the products ran in
amp_dtype                  str?    -         -   key the type amp ran (bfloat16, float16)
native_bf16                bool?   -         -   -   whether the CPU has bfloat16 instructions
tf32                       object  -         -   -   the TF32 switches as set (GPU)
batch_size_per_rank        int?    -         t   key samples per rank per step
batch_size_per_device      int     -         -   -   samples per device per step
global_batch_size          int     -         t   key samples per optimizer step, all devices
grad_accum                 int     -         -   -   micro-batches per optimizer step
timed_steps                int     -         t   -   steps timed
warmup_steps               int     -         t   -   untimed steps before them
seed                       int     -         -   -   the random seed of weights and data
image_size                 list    -         -   -   input height and width
num_classes                int     -         -   -   output classes
data_format                str     -         -   -   NCHW or NHWC
channels_last              bool    -         -   -   channels-last memory format
compiled                   bool    -         -   -   torch.compile
fused_optimizer            bool    -         -   -   the optimizer's fused step
fused_bn_relu_off_because  str?    -         -   -   why fused batch norm + ReLU did not run
knobs                      object  -         -   key every speed knob's value and source
optimizer                  str     -         -   -   the optimizer
lr                         number  -         -   -   learning rate
momentum                   number  -         -   -   SGD momentum
betas                      list    -         -   -   Adam's betas
weight_decay               number  -         -   -   weight decay
first_loss                 number  -         -   -   loss of the first step
final_loss                 number  -         -   -   loss of the last step
loss_fell                  bool    -         -   -   final loss below the first
gradient_averaging         str     -         -   -   how the TF 2 harness averages
backward_passes_per_step   int     -         -   -   Horovod's local accumulation
wall_time_s                number  s         t   -   timed steps' wall time, slowest rank's
wall_time_reduction        str     -         -   -   how the ranks' wall times combine
wall_time_excludes         str?    -         -   -   what the timed window leaves out
per_rank_wall_time_s       list    s         -   -   each rank's wall time
per_rank_images_per_sec    list    images/sec -   -   each rank's rate
per_rank_sequences_per_sec list    sequences/sec -   -   each rank's rate
per_rank_tokens_per_sec    list    tokens/sec -   -   each rank's rate
warmup_time_s              number  s         -   -   the warm-up steps' time
per_rank_step_p50_s        list    s         -   -   each rank's median step time
per_rank_step_p95_s        list    s         -   -   each rank's 95th-percentile step time
per_rank_ready_p50_s       list?   s         -   -   each rank's median time until ready to communicate (DDP)
per_rank_ready_p95_s       list?   s         -   -   its 95th percentile
per_rank_wait_p50_s        list?   s         -   -   each rank's median wait for the all-reduce after that
per_rank_wait_p95_s        list?   s         -   -   its 95th percentile
per_rank_host              list    -         -   -   each rank's host
per_rank_device            list    -         -   -   each rank's device (a GPU, or the CPUs it may use)
rank_spread                number? -         -   -   slowest rank's median over the fastest's
rank_timing_is             str     -         -   -   how the per-rank times are measured
slowest_rank               object? -         -   -   the rank the others waited for: rank, host, device, ratio
timed_start_unix           number  s         -   -   when timing began (rank 0's clock)
first_step_unix            number  s         -   -   when the first step (warm-up's) began, rank 0's clock
time_to_first_step_s       number? s         -   -   rank 0's process start (its launcher's fork) to its first step
data                       str     -         -   -   what the TensorFlow 2 harness trained on
data_source                str     -         -   key synthetic, jpeg, tfrecord (text: tokens)
data_path                  str     -         -   -   the dataset's path as the ranks saw it
data_images                int     -         -   -   images in the dataset
images_decoded             int     -         -   -   images the ranks decoded
data_files                 int     -         -   -   token files read
data_tokens                int     -         -   -   tokens in them
token_dtype                str     -         -   -   the token files' element type
token_layout               str     -         -   -   the token files' layout
windows_read               int     -         -   -   token windows read
data_workers               int     -         -   -   data-loader processes per rank
data_stall_s               number  s         -   -   time the step waited for data
data_stall_fraction        number  -         -   -   that, of the wall time
data_stall_is              str     -         -   -   how the stall is measured
per_rank_data_stall_s      list    s         -   -   each rank's stall
loader_rate                number? -         -   -   the data loader's own rate
loader_rate_is             str     -         -   -   how it is measured
loader_unit                str     -         -   -   its unit
per_rank_loader_rate       list?   -         -   -   each rank's loader rate
loader_steps               int     -         -   -   batches the loader-only rate was timed over
loader_tokens_per_sec      number? tokens/sec -   -   the loader's rate in tokens (LLMs)
task                       str     -         -   -   BERT's task: swag or squad
seq_length                 int     -         -   key tokens per sequence
sequences_per_instance     int     -         -   -   sequences per SWAG example
instances_per_sec          number  -         -   -   examples or windows per second
sequences_per_sec          number  -         -   -   sequences per second
num_layers                 int     -         -   -   transformer layers
dim                        int     -         -   -   model width
heads                      int     -         -   -   attention heads
kv_heads                   int     -         -   -   key/value heads
vocab_size                 int     -         -   -   vocabulary
activation_checkpointing   bool    -         -   key layers recomputed in the backward
flops_per_token            int     -         -   -   training FLOPs per token
matmul_params              int     -         -   -   parameters in matrix products
matmul_count               int     -         -   -   matrix products per layer
tokens_per_sec_per_device  number  tokens/sec -   -   tokens/s per device
achieved_tflops            number  TFLOP/s   -   -   model FLOP rate over all devices
achieved_tflops_per_device number  TFLOP/s   -   -   per device
mfu_peak                   number? -         -   -   model FLOPs utilisation of the peak
mfu_matmul                 number? -         -   -   of the measured matmul ceiling
mfu_formula                str     -         -   -   how MFU is computed
matmul_gflops              number? GFLOP/s   -   -   the ceiling handed in
peak_tflops_per_device     number? TFLOP/s   -   -   the device's published peak
peak_source                str     -         -   -   where that peak is published
fsdp_api                   str     -         -   -   FSDP's API
fsdp_param_dtype           str?    -         -   -   FSDP's parameter type
fsdp_sharded               bool    -         -   -   whether FSDP shards
mp_policy                  str?    -         -   -   FSDP's mixed-precision policy
dataparallel_devices       list    -         -   -   GPUs DataParallel spread over
parameter_servers          int     -         -   -   TensorFlow parameter servers
variable_update            str     -         -   -   TensorFlow variable update
variable_devices           any     -         -   -   where TensorFlow keeps variables
checkpoint_every           int     -         -   -   a save after every N-th timed step
checkpoint_dir             str     -         -   -   where they went
checkpoint_format          str     -         -   -   how they were written
checkpoint_count           int     -         -   -   saves
checkpoint_bytes           int     B         -   -   bytes per save
checkpoint_seconds         number  s         -   -   seconds per save
checkpoint_gbs             number  GB/s      -   -   save bandwidth
checkpoint_gbs_formula     str     -         -   -   how it is computed
checkpoints                list    -         -   -   every save
benchmark                  str     -         c   key the benchmark (storage: storage)
collective                 str     -         c   key nccl-tests' name of it
api                        str     -         -   -   the torch.distributed call
op                         str?    -         -   -   the reduction
root                       int?    -         -   -   the root rank
in_place                   bool    -         -   -   in place
dtype                      str     -         c   key the element type
sizes                      list    -         -   key per size: bytes, time, algbw, busbw, #wrong
size_is                    str     -         -   -   what a size counts
avg_busbw                  number  GB/s      -   -   mean bus bandwidth over the sizes
avg_busbw_is               str     -         -   -   how it is averaged
busbw_factor               number  -         -   -   busbw / algbw
time_reduction             str     -         -   -   how the ranks' times combine
iterations                 int     -         -   -   timed iterations per size
warmup_iterations          int     -         -   -   untimed ones
largest_bytes              int     B         -   -   the largest message
pairs                      list    -         -   -   send/recv: per pair of ranks
pair_count                 int     -         -   -   send/recv: pairs
min_pair_gbs               number  GB/s      -   -   the slowest pair
mean_pair_gbs              number  GB/s      -   -   the mean pair
max_pair_gbs               number  GB/s      -   -   the fastest pair
test                       str     -         s   key sequential or small-files
reader                     str     -         s   key the reader (harness or fio)
cache                      str     -         -   key how the page cache was kept out
fs_type                    str     -         -   key the file system's type
file                       str     -         -   -   the file read
file_bytes                 int     B         -   -   its size
files_found                int     -         -   -   files in the directory
block_bytes                int     B         -   -   read size
bytes_read                 int     B         -   -   bytes read
files_read                 int     -         -   -   files read
read_seconds               number  s         -   -   seconds reading
pass_gbs                   list    GB/s      -   -   each timed pass's bandwidth
"""


def _fields(table):
    fields = []
    for line in table.strip().splitlines():
        name, type_, unit, required, key, doc = line.split(None, 5)
        fields.append(Field(name, type_, None if unit == "-" else unit,
                            _REQUIRED[required], key == "key", doc))
    return tuple(fields)


#: Every field of the result, in the order the table gives them.
RESULT_FIELDS = _fields(_SCHEMA)
FIELDS = dict((field.name, field) for field in RESULT_FIELDS)
#: What a site's own command must print at least (dlrun's harness: all its
#: kind requires).
MINIMAL_FIELDS = ("metric", "value", "unit")
#: The fields whose values decide the comparability key.
KEY_FIELDS = tuple(field.name for field in RESULT_FIELDS if field.key)

_PYTHON_TYPES = {"str": (str,), "int": (int,), "number": (int, float),
                 "bool": (bool,), "list": (list, tuple), "object": (dict,)}


def result_kind(record):
    """training, collective or storage, from the record's metric; None for
    a metric the contract does not know."""
    return KIND_OF_METRIC.get(record.get("metric"))


def type_problem(field, value, required=False):
    """Why ``value`` is not of ``field``'s type, else None.  Null is "not
    measured here": a field a result kind requires may be null only where
    its type says "?", any other field always."""
    kind = field.type.rstrip("?")
    if value is None:
        nullable = field.type.endswith("?") or kind == "any" or not required
        return None if nullable else "is null"
    if kind == "any":
        return None
    if kind in ("int", "number") and isinstance(value, bool):
        return "is a boolean, not a %s" % kind
    if not isinstance(value, _PYTHON_TYPES[kind]):
        return "is a %s, not a %s" % (type(value).__name__, kind)
    if kind == "number" and isinstance(value, float) and not math.isfinite(value):
        return "is not finite"
    return None


def result_problems(record, strict=False):
    """Every way ``record`` breaks the schema, one sentence each: a field
    its kind requires that is missing, a field of the wrong type, and with
    ``strict`` a field the schema does not declare.  dlrun's harness marks
    its records with ``harness_version`` and keeps the whole schema; a
    site's own command (``result: {format: dlrun-result}``) may print the
    least record, MINIMAL_FIELDS."""
    if not isinstance(record, dict):
        return ["the result is a JSON %s, not an object"
                % type(record).__name__]
    if "harness_version" not in record:
        return _problems(record, dict((name, name in MINIMAL_FIELDS)
                                      for name in MINIMAL_FIELDS))
    kind = result_kind(record)
    if kind is None:
        return ["metric %r is none of %s"
                % (record.get("metric"), ", ".join(sorted(KIND_OF_METRIC)))]
    required = dict((field.name, kind in field.required)
                    for field in RESULT_FIELDS)
    if kind == STORAGE:
        required["value"] = record.get("reader") != "fio"  # fio's JSON has it
    problems = _problems(record, required)
    if strict:
        problems += ["field %s is not in the result schema" % name
                     for name in sorted(set(record) - set(FIELDS))]
    return problems


def _problems(record, required):
    """The problems of ``record``'s fields of ``required`` ({name: whether
    the record must carry it})."""
    problems = []
    for name, needed in required.items():
        field = FIELDS[name]
        if name not in record:
            if needed:
                problems.append("field %s (%s) is missing"
                                % (name, field.doc))
            continue
        why = type_problem(field, record[name], needed)
        if why:
            problems.append("field %s %s" % (name, why))
    return problems


def check_result(record, strict=False):
    """``record`` if it keeps the schema, else ValueError with one line."""
    problems = result_problems(record, strict)
    if problems:
        raise ValueError("the result breaks dlrun's result schema: "
                         + "; ".join(problems))
    return record
