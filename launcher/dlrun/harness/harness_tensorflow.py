#!/usr/bin/env python
"""dlrun in-container TensorFlow 2 training benchmark harness.

Trains an image-classification model in the style of tf_cnn_benchmarks (same
model names, same log layout, same "images/sec" definition) with a TF 2
custom training loop, and ends with exactly one machine-readable result line
- the same contract as ``harness_pytorch.py``.  For TensorFlow 2 (Keras 3);
the TensorFlow 1.x images run tf_cnn_benchmarks itself.

Files
-----
Shipped together in one directory; the entry puts its own directory on
``sys.path``: ``harness_common.py`` (shared with the PyTorch harness: exit codes, the
error type, output, argument types, throughput statistics; standard library
only), ``harness_ranks.py`` (shared too: the rank and world size from the
launcher's variables), ``harness_contract.py`` and ``harness_result_schema.py``
(shared too: the contract with dlrun's launcher), ``harness_node.py`` (the
node), ``harness_tensorflow_models.py`` (the
models), ``harness_tensorflow_data.py`` (synthetic batch, tf.data
pipelines), ``harness_tensorflow_process.py`` (ranks, Horovod, threads,
device, versions), ``harness_tensorflow_train.py`` (the training loop,
timing, replica check, result) and ``harness_tensorflow_ps.py`` (parameter
servers on this machine).  None imports anything of dlrun.

Usage
-----
    python harness_tensorflow.py --model resnet50 --batch-size 32 --steps 100
    mpirun -np 2 python harness_tensorflow.py --model resnet50_v1.5
    python harness_tensorflow.py --model vgg16 --data-dir /data

Models
------
From keras.applications (weights=None, classifier_activation=None):
resnet50, resnet101, resnet152 (Keras' ResNet v1: the stride on the first
1x1 convolution of a downsampling bottleneck, convolutions with biases),
vgg16, inception3 (InceptionV3, no auxiliary head; >= 75x75).  Written here
(compact Keras functional definitions): resnet18, resnet34 (basic blocks),
resnet50_v1.5, resnet101_v1.5, resnet152_v1.5 (torchvision's ResNet:
stride on the 3x3 convolution, convolutions without biases + batch norm),
alexnet (torchvision's, with its adaptive 6x6 average pooling), lenet (tf_cnn_benchmarks' lenet
on 28x28x3, 1000 classes) and trivial (conv 8 3x3 + batch norm + global
average pool + fc; smoke tests only).  Default input sizes: 224x224;
inception3 299; lenet 28; trivial 32; ``--image-size`` overrides (keras
models: >= 32).  ``params`` counts trainable weights (batch-norm moving
statistics excluded, as PyTorch's buffers).

Training benchmark
------------------
Synthetic data (default): one random batch of images and labels per rank
(seeded with --seed + rank), made once and kept on the device, as
tf_cnn_benchmarks.  Real data (``--data-dir DIR``, ``--data-format
auto|folder|tfrecord``; auto picks TFRecord when ``train-*-of-*`` shards lie
in DIR or DIR/train): ImageNet TFRecords (``image/encoded`` JPEG,
``image/class/label`` 1..1000, used as label - 1 modulo 1000), or an image
folder tree DIR[/train]/<class>/*.jpg (classes numbered in name order).
tf.data reads this rank's shard of the files, decodes, resizes the shorter
side to the input size, takes a random square crop and a random flip,
scales to [0, 1], batches and prefetches; --data-workers J sets the map's
parallelism (0: tf.data.AUTOTUNE).

Loss: sparse softmax cross entropy on float32 logits; optimizer: Keras SGD
with momentum (--lr default 0.01, --momentum 0.9).  The step is a
tf.function (graph, no XLA).  ``--precision amp`` (or ``mixed_bfloat16``)
sets Keras' mixed_bfloat16 policy: bfloat16 compute, float32 variables.

Ranks: one process, or several started by a launcher (Open MPI's mpirun,
horovodrun, Slurm's srun), first match wins: OMPI_COMM_WORLD_RANK/SIZE,
HOROVOD_RANK/SIZE, PMIX_RANK + SLURM_NTASKS, SLURM_PROCID/NTASKS.  Several
processes use Horovod (``horovod.tensorflow``; exit 2 without it):
``hvd.broadcast_variables`` of the model's and the optimizer's variables
from rank 0 before the first step, then gradients averaged with
``hvd.DistributedGradientTape`` (``--gradient-averaging tape``, default).
``--gradient-averaging keras-optimizer`` wraps the optimizer in
``horovod.tensorflow.keras.DistributedOptimizer`` instead, which under
Keras 3 runs but does not average: it exists so that the replica check can
be shown to catch it.

Parameter servers (``--parameter-servers N``, ``--ps-workers W``, default 2;
one process, synthetic data): the harness is the chief of a local cluster it
starts itself - N parameter servers and W workers, each this file re-run as
a ``tf.distribute.Server`` (gRPC, free 127.0.0.1 ports, TF_CONFIG) - and
trains with ``tf.distribute.ParameterServerStrategy`` and a
``ClusterCoordinator``: the variables live on the parameter servers, each
scheduled step runs on some worker and updates them asynchronously.  Rate
= batch * timed steps / the coordinator's wall time from the first timed
schedule to the join; the result has variable_update
"parameter_server", parameter_servers, cluster, variable_devices,
world_size W and backend "grpc" (no replica check: one copy of the
variables).  ``harness_tensorflow_ps.py`` holds it.

Timing as in ``harness_pytorch.py``: warm-up steps excluded, a barrier
before the timed loop, each timed step waits for its loss; a rank's rate =
batch * steps / its wall time; the total = world_size * batch * steps /
the maximum wall time over ranks.  Step rows show the global rate from rank
0's step times (+/- standard error, jitter).

Output: rank 0 writes a tf_cnn_benchmarks-like log ending with
"total images/sec: N" and then exactly one line ``DLRUN_RESULT {json}``
with the PyTorch harness's image-model fields (framework "tensorflow";
allocator "system"; backend "horovod" or "none"; channels_last true,
data_format "NHWC"; mkldnn: whether oneDNN is on, TF_ENABLE_ONEDNN_OPTS)
plus data (what was read), gradient_averaging, image_size, keras_version,
model_source ("keras.applications" or "dlrun") and, with Horovod,
horovod_version.

With more than one rank a float64 checksum (sum and sum of absolute values)
of all trainable variables is gathered from every rank at the end and must
agree to a relative 1e-6 of the absolute sum; otherwise "replicas
diverged" (exit 4, no result line).  Test hook: with
DLRUN_HARNESS_TEST_PERTURB_RANK=R rank R adds 1.0 to its first trainable
variable just before the check.

Errors are one stderr line starting with ``dlrun-harness: error:``.  Exit
codes: 0 ok; 1 unexpected failure; 2 bad option, TensorFlow missing or
unsupported feature; 3 world size differs from --expected-world-size;
4 replicas diverged; 5 non-finite loss.
"""

import os
import sys

# The siblings live next to this file, wherever it was started from.
HARNESS_DIR = os.path.dirname(os.path.realpath(__file__))
if HARNESS_DIR not in sys.path:
    sys.path.insert(0, HARNESS_DIR)

from harness_common import (ArgumentParser,  # noqa: E402
                            HarnessError, non_negative, positive,
                            report_failures)
from harness_contract import CODE_PRECISIONS, DEFAULT_PRECISION  # noqa: E402

# Kept in step with harness_tensorflow_models.MODEL_NAMES (a test checks),
# so that --help and bad names need no TensorFlow.
MODEL_NAMES = sorted([
    "alexnet", "inception3", "lenet", "resnet101", "resnet101_v1.5",
    "resnet152", "resnet152_v1.5", "resnet18", "resnet34", "resnet50",
    "resnet50_v1.5", "trivial", "vgg16"])


def build_parser():
    p = ArgumentParser(
        prog="dlrun-harness-tf",
        description="TensorFlow 2 training benchmark (tf_cnn_benchmarks-"
                    "style; synthetic or real images; Horovod).")
    p.add_argument("--model", default="resnet50_v1.5", choices=MODEL_NAMES)
    p.add_argument("--batch-size", type=positive, default=32,
                   help="images per rank and step (default 32)")
    p.add_argument("--steps", type=positive, default=100,
                   help="timed steps (default 100)")
    p.add_argument("--warmup-steps", type=non_negative, default=10,
                   help="untimed warm-up steps (default 10)")
    p.add_argument("--precision",
                   choices=CODE_PRECISIONS["tensorflow"] + ("mixed_bfloat16",),
                   default=DEFAULT_PRECISION,
                   help="bf16 = amp = mixed_bfloat16 (Keras policy)")
    p.add_argument("--image-size", type=positive, default=None,
                   help="square input size (default: the model's)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"),
                   default="auto")
    p.add_argument("--threads", type=positive, default=None,
                   help="intra-op threads (default: TensorFlow's choice)")
    p.add_argument("--inter-threads", type=positive, default=None,
                   help="inter-op threads (default: TensorFlow's choice)")
    p.add_argument("--expected-world-size", type=positive, default=None)
    p.add_argument("--gradient-averaging", default="tape",
                   choices=("tape", "keras-optimizer"),
                   help="several processes: hvd.DistributedGradientTape "
                        "(default) or Horovod's Keras DistributedOptimizer "
                        "(does not average under Keras 3; for tests)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--display-every", type=positive, default=10)
    p.add_argument("--lr", type=float, default=None,
                   help="learning rate (default 0.01)")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--data-dir", default=None,
                   help="real data: an image-folder tree or ImageNet "
                        "TFRecord shards (default: synthetic)")
    p.add_argument("--data-format", default="auto",
                   choices=("auto", "folder", "tfrecord"))
    p.add_argument("--data-workers", type=non_negative, default=0,
                   help="tf.data map parallelism (0: AUTOTUNE)")
    p.add_argument("--parameter-servers", type=non_negative, default=0,
                   help="N > 0: ParameterServerStrategy with N parameter "
                        "servers and --ps-workers workers, all started on "
                        "this machine by this one process")
    p.add_argument("--ps-workers", type=positive, default=2,
                   help="workers with --parameter-servers (default 2)")
    p.add_argument("--timeout-s", type=positive, default=None,
                   help="accepted for the launcher's sake; Horovod's own "
                        "timeouts apply")
    return p


def main(argv=None):
    if os.environ.get("DLRUN_HARNESS_PS_SERVER"):  # started by --parameter-servers
        from harness_tensorflow_ps import serve_forever
        return serve_forever()
    args = build_parser().parse_args(argv)
    return report_failures(lambda: _run(args))


def _run(args):
    try:
        import tensorflow  # noqa: F401
    except ImportError as exc:
        raise HarnessError("TensorFlow 2 is not importable (%s); valid: "
                           "an interpreter with tensorflow installed, "
                           "e.g. pip install 'dlrun[tf]'" % exc)
    from harness_tensorflow_train import run_benchmark
    return run_benchmark(args)


if __name__ == "__main__":
    CODE = main()
    PS = sys.modules.get("harness_tensorflow_ps")
    if PS is not None and PS.CLUSTERS_STARTED:
        # Skip TensorFlow's teardown: it would call the servers just stopped.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(CODE)
    sys.exit(CODE)
