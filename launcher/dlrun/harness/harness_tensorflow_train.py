"""dlrun TensorFlow 2 harness: the training benchmark - the custom training
loop (tf.function + GradientTape; Horovod's DistributedGradientTape with
several processes), its step rows and the replica check.  Standard library +
TensorFlow; runs on Python >= 3.6.  What it measures is described in
``harness_tensorflow.py``'s notes.
"""

import math
import os
import time

import numpy as np
import tensorflow as tf

from harness_common import (EXIT_DIVERGED, EXIT_NONFINITE,
                            NUM_CLASSES, PERTURB_ENV,
                            REPLICA_RTOL, RULE, HarnessError, TimedWindow,
                            cpu_has_native_bf16, out, perf_stats, print_result,
                            quality_fields)
from harness_contract import PRECISION_OF_DTYPE, ran_dtype
from harness_tensorflow_data import (detect_format, real_dataset,
                                     synthetic_batch)
from harness_tensorflow_models import (build_model, count_params,
                                       default_image_size, model_source)
from harness_tensorflow_process import run_fields, setup_process
from harness_tensorflow_ps import run_ps

CNN_LR = 0.01


def param_checksum(variables):
    """(sum, sum of absolute values) of the variables, in float64."""
    total = total_abs = 0.0
    for v in variables:
        d = np.asarray(v.numpy(), dtype=np.float64)
        total += float(d.sum())
        total_abs += float(np.abs(d).sum())
    return [total, total_abs]


def replicas_agree(rows, rtol=REPLICA_RTOL):
    """Whether every rank's checksum row equals every other's, to ``rtol``
    of the absolute-value sum."""
    cmax = [max(col) for col in zip(*rows)]
    cmin = [min(col) for col in zip(*rows)]
    scale = max(abs(cmax[1]), abs(cmin[1]), 1e-30)
    return all(abs(a - b) <= rtol * scale for a, b in zip(cmax, cmin)), \
        cmax, cmin


def make_step(model, optimizer, comm, averaging):
    """The compiled training step.  ``averaging`` "tape" averages gradients
    with hvd.DistributedGradientTape; "keras-optimizer" wraps the optimizer
    in horovod.tensorflow.keras.DistributedOptimizer instead (the path that
    does not average under Keras 3: kept so that tests can prove the replica
    check catches it)."""
    import keras
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    hvd = comm.hvd
    variables = model.trainable_variables
    # Horovod's tape keys gradients by tf.Variable.ref(): give it the
    # tf.Variables behind Keras 3's variables (the same storage).
    sources = [tf_variable(v) for v in variables]

    @tf.function
    def step(images, labels):
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            loss = loss_fn(labels, tf.cast(logits, tf.float32))
        if hvd is not None and averaging == "tape":
            tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, sources)
        optimizer.apply_gradients(zip(grads, variables))
        return loss
    return step


def tf_variable(variable):
    """The tf.Variable behind a Keras 3 variable (itself for Keras 2)."""
    inner = getattr(variable, "value", variable)
    return inner if hasattr(inner, "ref") else variable


def optimizer_variables(optimizer):
    """The optimizer's variables: a list in Keras 3, where Horovod's Keras
    wrapper turns ``variables`` into a method that fails when called."""
    found = getattr(optimizer, "_variables", None)
    return list(found) if found is not None else list(optimizer.variables)


def _optimizer(args, lr, comm):
    import keras
    opt = keras.optimizers.SGD(learning_rate=lr, momentum=args.momentum)
    if comm.hvd is not None and args.gradient_averaging == "keras-optimizer":
        import horovod.tensorflow.keras as hvd_keras
        opt = hvd_keras.DistributedOptimizer(opt)
    return opt


def _header(args, comm, device_type, image_size, data_what, variables):
    out("TensorFlow:  %s" % tf.__version__)
    out("Model:       %s" % args.model)
    out("Dataset:     imagenet (%s)" % data_what)
    out("Mode:        training")
    out("Batch size:  %d global" % (args.batch_size * comm.world_size))
    out("             %d per device" % args.batch_size)
    out("Image size:  %dx%d" % (image_size, image_size))
    out("Num batches: %d" % args.steps)
    kind = "gpu" if device_type == "cuda" else "cpu"
    out("Devices:     %s" % (["/%s:0" % kind] * comm.world_size))
    out("Data format: NHWC")
    out("Precision:   %s" % args.precision)
    out("Optimizer:   sgd")
    if variables:
        out("Variables:   %s" % variables)
        out("==========")
        out("Running warm up")
    else:
        out("==========")


def run_benchmark(args):
    # from here: the node over the whole benchmark, where the timed steps
    # are too short to judge it (harness_common.TimedWindow)
    window = TimedWindow()
    comm, rank_source, device_type, device_name = setup_process(args)
    rank, world_size = comm.rank, comm.world_size
    import keras
    precision = {"mixed_bfloat16": "amp"}.get(args.precision, args.precision)
    amp_dtype = None if precision == "fp32" else ran_dtype(
        precision, device_type, code="tensorflow")
    keras.mixed_precision.set_global_policy("mixed_bfloat16" if amp_dtype
                                            else "float32")
    image_size = args.image_size or default_image_size(args.model)
    lr = CNN_LR if args.lr is None else args.lr
    keras.utils.set_random_seed(args.seed)
    base = _base_result(args, image_size, lr, amp_dtype, device_type,
                        device_name, rank_source)
    if args.parameter_servers:
        return _run_parameter_servers(args, comm, image_size, lr, base)
    model = build_model(args.model, image_size)
    params = count_params(model)
    optimizer = _optimizer(args, lr, comm)
    optimizer.build(model.trainable_variables)
    if comm.hvd is not None:  # every rank starts from rank 0's state
        comm.hvd.broadcast_variables([tf_variable(v)
                                      for v in model.variables], 0)
        comm.hvd.broadcast_variables([tf_variable(v) for v in
                                      optimizer_variables(optimizer)], 0)
    step = make_step(model, optimizer, comm, args.gradient_averaging)

    run_step, data_what, data_source = _data(args, step, image_size, rank,
                                             world_size)
    if rank == 0:
        _header(args, comm, device_type, image_size, data_what,
                "horovod (%s)" % args.gradient_averaging
                if world_size > 1 else "replicated")
    first_loss, warmup_s = _warm_up(args, run_step, comm, rank)
    per_step = args.batch_size
    window.start()
    start_unix = time.time()  # where the timed window lies (telemetry)
    wall, loss, stall, first, step_times = _timed_steps(
        args, run_step, rank, world_size, per_step)
    window_row = window.stop(step_times, base["threads"])
    first_loss = first if first_loss is None else first_loss

    _check_replicas(args, comm, model, loss)
    gathered = comm.all_gather([per_step * args.steps / wall, wall, stall])
    result = _result(args, comm, base, gathered, device_type, {
        "quality": quality_fields(comm.all_gather(window_row)),
        "timed_start_unix": start_unix,  # rank 0's clock
        "params": params, "data": data_what, "final_loss": loss,
        "data_source": data_source, "warmup_time_s": warmup_s})
    result.update(_contract_fields(args, gathered, first_loss, loss))
    total = result["value"]
    if rank == 0:
        out(RULE)
        out("total images/sec: %.2f" % total)
        out(RULE)
        print_result(result)
    return 0



def _result(args, comm, base, gathered, device_type, measured):
    """The DLRUN_RESULT fields: `base`, the rates and times gathered from
    every rank, and what this run measured."""
    world_size = comm.world_size
    max_wall = max(g[1] for g in gathered)
    result = dict(base)
    result.update(measured)
    result.update({
        "value": world_size * args.batch_size * args.steps / max_wall,
        "per_rank_images_per_sec": [g[0] for g in gathered],
        "per_rank_wall_time_s": [g[1] for g in gathered],
        "wall_time_s": max_wall, "world_size": world_size,
        "num_devices": world_size,
        "global_batch_size": args.batch_size * world_size,
        "backend": "horovod" if world_size > 1 else "none",
        "gradient_averaging": (args.gradient_averaging if world_size > 1
                               else "none"),
        # The PyTorch harness's contract: how replicas are kept in step,
        # whether the optimizer step is fused, what was read.
        "dist": "horovod" if comm.hvd is not None else "none",
        "fused_optimizer": False,  # Keras applies its own update ops
        # The PyTorch harness's speed knobs (dlrun tune): none here; no
        # thread is pinned to a CPU, no fused kernel kept out
        "knobs": {}, "pinned_cpus": None, "fused_bn_relu_off_because": None})
    if args.data_dir:
        result["data_path"] = args.data_dir
    result.update(run_fields(device_type, comm))
    return result

def _warm_up(args, run_step, comm, rank):
    """The untimed steps: (the first loss seen, None without warm-up; their
    seconds)."""
    started = time.perf_counter()
    first_loss = None
    for _ in range(args.warmup_steps):
        value = float(run_step()[0])
        first_loss = value if first_loss is None else first_loss
    comm.barrier()
    if rank == 0:
        out("Done warm up")
        out("Step\tImg/sec\ttotal_loss")
    return first_loss, time.perf_counter() - started


def _check_replicas(args, comm, model, loss):
    """End the run when any rank's loss is not finite or the replicas'
    parameters differ after training."""
    world_size = comm.world_size
    bad = max(row[0] for row in comm.all_gather([0.0 if _finite(loss)
                                                 else 1.0]))
    if bad:
        raise HarnessError("loss is not finite (rank 0: %r) after %d steps"
                           % (loss, args.steps), EXIT_NONFINITE)
    if world_size > 1:
        _maybe_perturb(model, comm.rank)
        rows = comm.all_gather(param_checksum(model.trainable_variables))
        agree, cmax, cmin = replicas_agree(rows)
        if not agree:
            raise HarnessError(
                "replicas diverged: parameter checksums (sum, abs sum) differ "
                "across %d ranks: max %r, min %r (relative tolerance %g; "
                "gradient averaging: %s)" % (world_size, cmax, cmin,
                                             REPLICA_RTOL,
                                             args.gradient_averaging),
                EXIT_DIVERGED)


def _data(args, step, image_size, rank, world_size):
    """(run_step, what the header calls the data, data_source): real data
    from --data-dir (run_step's wait for the next batch is recorded as data
    stall) or one synthetic batch."""
    if not args.data_dir:
        images, labels = synthetic_batch(args.batch_size, image_size,
                                         NUM_CLASSES, args.seed + rank)
        return (lambda: (step(images, labels), 0.0)), "synthetic", "synthetic"
    dataset, data_what = real_dataset(
        args.data_dir, args.data_format, args.batch_size, image_size,
        NUM_CLASSES, rank, world_size, args.data_workers, args.seed + rank)
    batches = iter(dataset)
    data_source = {"folder": "jpeg"}.get(  # the PyTorch harness's names
        detect_format(args.data_dir, args.data_format), "tfrecord")

    def run_step():
        before = time.perf_counter()
        images, labels = next(batches)
        waited = time.perf_counter() - before
        return step(images, labels), waited
    return run_step, data_what, data_source


def _timed_steps(args, run_step, rank, world_size, per_step):
    """(wall, final loss, data-stall seconds, first loss, step times) of the
    timed steps; each step waits for its loss, so per-step times are real."""
    step_times, stall = [], 0.0
    loss = first = None
    start = last = time.perf_counter()
    for i in range(args.steps):
        value, waited = run_step()
        loss = float(value)
        stall += waited
        first = loss if first is None else first
        now = time.perf_counter()
        step_times.append(now - last)
        n = i + 1
        # the last step's row too: it covers every timed step, as the total
        if n == 1 or n % args.display_every == 0 or n == args.steps:
            if rank == 0:
                rate, err, jitter = perf_stats(world_size * per_step,
                                               step_times)
                out("%d\timages/sec: %.1f +/- %.1f (jitter = %.1f)\t%.3f"
                    % (n, rate, err, jitter, loss))
            if world_size == 1 and not _finite(loss):
                raise HarnessError("loss is not finite (%r) at step %d"
                                   % (loss, n), EXIT_NONFINITE)
            last = time.perf_counter()
        else:
            last = now
    return time.perf_counter() - start, loss, stall, first, step_times


def _contract_fields(args, gathered, first_loss, loss):
    """The fields the PyTorch harness's results carry, filled as this
    harness can: one device per rank, no accumulation or checkpoints, the
    data stall of real data, no loader-only probe."""
    stalls = [g[2] for g in gathered]
    return {
        "batch_size_per_device": args.batch_size, "devices_per_rank": 1,
        "grad_accum": 1, "wall_time_excludes": None,
        "first_loss": first_loss, "loss_fell": loss < first_loss,
        "data_stall_s": max(stalls), "per_rank_data_stall_s": stalls,
        "data_stall_fraction": max(g[2] / g[1] for g in gathered),
        "data_stall_is": "seconds of the timed steps spent waiting for the "
                         "next batch of tf.data, the slowest rank's",
        "loader_rate": None, "per_rank_loader_rate": None,
        "loader_unit": "images/sec",
        "loader_rate_is": "not measured by the TensorFlow harness",
    }


def _base_result(args, image_size, lr, amp_dtype, device_type, device_name,
                 rank_source):
    """The result fields every way of training fills the same way."""
    return {
        "metric": "throughput", "unit": "images/sec",
        "formula": "world_size*batch_size_per_rank*timed_steps/wall_time_s",
        "wall_time_reduction": "max_over_ranks", "rank_source": rank_source,
        "model": args.model, "model_source": model_source(args.model),
        "batch_size_per_rank": args.batch_size,
        "timed_steps": args.steps, "warmup_steps": args.warmup_steps,
        "precision": {"mixed_bfloat16": "amp"}.get(args.precision,
                                                   args.precision),
        "precision_ran": PRECISION_OF_DTYPE[amp_dtype or "float32"],
        "amp_dtype": amp_dtype,
        "tf32": {},  # the TensorFlow 2 harness trains on CPUs, which have no TF32
        "native_bf16": cpu_has_native_bf16() if amp_dtype else None,
        "compiled": False,  # tf.function graphs, no XLA
        "device": device_type, "device_name": device_name,
        "threads": args.threads or tf.config.threading
        .get_intra_op_parallelism_threads() or os.cpu_count(),
        "seed": args.seed, "data_workers": args.data_workers,
        "image_size": [image_size, image_size], "num_classes": NUM_CLASSES,
        "channels_last": True, "data_format": "NHWC",
        "optimizer": "sgd", "lr": lr, "momentum": args.momentum,
    }


def _run_parameter_servers(args, comm, image_size, lr, base):
    """--parameter-servers: one process that starts its own local cluster."""
    if comm.world_size > 1:
        raise HarnessError("--parameter-servers starts its own local cluster; "
                           "valid: one process (no mpirun/srun)")
    if args.data_dir:
        raise HarnessError("--parameter-servers trains on synthetic data "
                           "only; valid: leave out --data-dir")

    def build():
        model = build_model(args.model, image_size)
        optimizer = _optimizer(args, lr, comm)
        optimizer.build(model.trainable_variables)
        return model, optimizer, count_params(model)

    def batch():
        return synthetic_batch(args.batch_size, image_size, NUM_CLASSES,
                               args.seed)
    _header(args, comm, "cpu", image_size, "synthetic", None)
    entry = os.path.join(os.path.dirname(os.path.realpath(__file__)),
                         "harness_tensorflow.py")
    result = dict(base)
    result.update(run_ps(args, build, batch, entry))
    result.update(run_fields("cpu", comm))
    print_result(result)
    return 0


def _maybe_perturb(model, rank):
    """The documented test hook (see the entry file's notes)."""
    value = os.environ.get(PERTURB_ENV)
    if value is not None and value.strip() == str(rank):
        first = model.trainable_variables[0]
        first.assign(first + tf.ones_like(first))


def _finite(value):
    return not (math.isnan(value) or math.isinf(value))
