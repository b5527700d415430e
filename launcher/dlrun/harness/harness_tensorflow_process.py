"""dlrun TensorFlow 2 harness: the process - its rank and world size from the
launcher's environment, Horovod, threads, device, and the result fields that
say what it ran on.  Standard library + TensorFlow (+ Horovod with more than
one process); runs on Python >= 3.6.
"""

import os
import platform

import tensorflow as tf

from harness_common import (EXIT_WORLD_SIZE, HARNESS_VERSION,
                            HarnessError, cpu_name, node_facts)
from harness_ranks import check_world_size, detect_rank_env


class Comm(object):
    """The collectives the harness needs: Horovod's with several processes,
    trivial ones for one."""

    def __init__(self, hvd):
        self.hvd = hvd
        self.rank = hvd.rank() if hvd else 0
        self.world_size = hvd.size() if hvd else 1
        self.local_rank = hvd.local_rank() if hvd else 0

    def all_gather(self, values):
        """Every rank's list of floats, in rank order."""
        row = tf.constant([[float(v) for v in values]], dtype=tf.float64)
        if self.hvd is None:
            return row.numpy().tolist()
        return self.hvd.allgather(row).numpy().tolist()

    def barrier(self):
        if self.hvd is not None:
            self.hvd.allreduce(tf.constant(0.0), op=self.hvd.Sum).numpy()


def setup_process(args):
    """Check the world size, start Horovod where there are several
    processes, settle threads and the device.  Returns (comm, rank_source,
    device_type, device_name)."""
    rank, world_size, _, source = detect_rank_env()
    check_world_size(args.expected_world_size, world_size, rank, source)
    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    if args.inter_threads:
        tf.config.threading.set_inter_op_parallelism_threads(
            args.inter_threads)
    hvd = None
    if world_size > 1:
        try:
            import horovod.tensorflow as hvd
        except ImportError as exc:
            raise HarnessError("%d processes need Horovod with TensorFlow "
                               "support (import horovod.tensorflow failed: "
                               "%s); valid: one process, or install horovod "
                               "built with HOROVOD_WITH_TENSORFLOW=1"
                               % (world_size, exc))
        hvd.init()
        if hvd.size() != world_size:
            raise HarnessError("Horovod sees %d processes, the launcher %d "
                               "(%s)" % (hvd.size(), world_size, source),
                               EXIT_WORLD_SIZE)
    comm = Comm(hvd)
    gpus = tf.config.list_physical_devices("GPU")
    if args.device == "cuda" and not gpus:
        raise HarnessError("--device cuda: TensorFlow sees no GPU (this "
                           "TensorFlow %s); valid: --device cpu"
                           % tf.__version__)
    if args.device == "cpu" or not gpus:
        if gpus:
            tf.config.set_visible_devices([], "GPU")
        return comm, source, "cpu", cpu_name()
    gpu = gpus[comm.local_rank % len(gpus)]
    tf.config.set_visible_devices([gpu], "GPU")
    tf.config.experimental.set_memory_growth(gpu, True)
    details = tf.config.experimental.get_device_details(gpu)
    return comm, source, "cuda", details.get("device_name", gpu.name)


def run_fields(device_type, comm):
    """Result fields every run shares: versions, allocator, status."""
    build = tf.sysconfig.get_build_info()
    fields = {
        "allocator": "system",  # TensorFlow's own CPU allocator
        "allocator_library": None,
        "harness_version": HARNESS_VERSION,
        "status": "ok",
        "framework": "tensorflow",
        "framework_version": str(tf.__version__),
        "python_version": platform.python_version(),
        "keras_version": _keras_version(),
        # TensorFlow >= 2.9 uses oneDNN on x86 Linux unless told not to.
        "mkldnn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "1") != "0",
        "node": node_facts(_gpus()),
    }
    if build.get("cuda_version"):
        fields["cuda_version"] = str(build["cuda_version"])
    if device_type == "cuda" and build.get("cudnn_version"):
        fields["cudnn_version"] = str(build["cudnn_version"])
    if comm.hvd is not None:
        fields["horovod_version"] = _horovod_version()
    return fields


def _gpus():
    """[{name, memory_mib}] of the GPUs TensorFlow sees (it does not say
    their memory)."""
    found = []
    for gpu in tf.config.list_physical_devices("GPU"):
        details = tf.config.experimental.get_device_details(gpu)
        found.append({"name": details.get("device_name", gpu.name),
                      "memory_mib": None})
    return found


def _keras_version():
    try:
        import keras
        return str(keras.__version__)
    except ImportError:
        return None


def _horovod_version():
    try:
        import horovod
        return str(horovod.__version__)
    except (ImportError, AttributeError):
        return None
