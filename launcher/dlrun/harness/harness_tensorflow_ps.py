"""dlrun TensorFlow 2 harness: parameter servers on this machine - TF 2's
ParameterServerStrategy with --parameter-servers N servers and --ps-workers W
workers, all started here by the harness (the coordinator) as tf.distribute
servers over gRPC on free localhost ports.  Standard library + TensorFlow;
runs on Python >= 3.6.  What it measures is described in
``harness_tensorflow.py``'s notes.
"""

import json
import os
import socket
import subprocess
import sys
import time

import tensorflow as tf

from harness_common import (EXIT_NONFINITE, NUM_CLASSES, RULE,
                            HarnessError, out)

SERVER_ENV = "DLRUN_HARNESS_PS_SERVER"  # set in the servers the harness starts
CLUSTERS_STARTED = []  # the entry file skips TensorFlow's teardown after one


def serve_forever():
    """A worker or parameter server: its task comes from TF_CONFIG."""
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    server = tf.distribute.Server(resolver.cluster_spec(),
                                  job_name=resolver.task_type,
                                  task_index=resolver.task_id,
                                  protocol="grpc", start=True)
    server.join()


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start_cluster(servers, workers, entry):
    """(cluster dict, server processes): this process is the chief."""
    cluster = {"chief": ["127.0.0.1:%d" % _free_port()],
               "worker": ["127.0.0.1:%d" % _free_port()
                          for _ in range(workers)],
               "ps": ["127.0.0.1:%d" % _free_port() for _ in range(servers)]}
    procs = []
    for job, count in (("worker", workers), ("ps", servers)):
        for index in range(count):
            env = dict(os.environ)
            env["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {
                "type": job, "index": index}})
            env[SERVER_ENV] = "1"
            env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
            procs.append(subprocess.Popen([sys.executable, entry], env=env,
                                          stdout=subprocess.DEVNULL))
    os.environ["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {
        "type": "chief", "index": 0}})
    CLUSTERS_STARTED.append(cluster)
    return cluster, procs


def run_ps(args, build, batch_fn, entry):
    """Train with ParameterServerStrategy; returns (result fields, total
    rate).  ``build()`` makes (model, optimizer, params) under the strategy's
    scope; ``batch_fn()`` one synthetic (images, labels) batch."""
    import keras
    cluster, procs = start_cluster(args.parameter_servers, args.ps_workers,
                                   entry)
    try:
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        strategy = tf.distribute.ParameterServerStrategy(resolver)
        coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
        with strategy.scope():
            model, optimizer, params = build()
        loss_fn = keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction="sum")
        batch = args.batch_size

        def dataset_fn(_):
            return tf.data.Dataset.from_tensors(batch_fn()).repeat()

        per_worker = coordinator.create_per_worker_dataset(
            lambda: strategy.distribute_datasets_from_function(dataset_fn))
        iterator = iter(per_worker)

        step = _step(strategy, model, optimizer, loss_fn, batch)

        out("Variables:   parameter_server (%d ps, %d workers, "
            "asynchronous)" % (args.parameter_servers, args.ps_workers))
        out("Running warm up")
        for _ in range(args.warmup_steps):
            coordinator.schedule(step, args=(iterator,))
        coordinator.join()
        out("Done warm up")
        start_unix = time.time()  # where the timed window lies (telemetry)
        start = time.perf_counter()
        scheduled = [coordinator.schedule(step, args=(iterator,))
                     for _ in range(args.steps)]
        coordinator.join()
        wall = time.perf_counter() - start
        loss = float(scheduled[-1].fetch())
        devices = sorted(set(v.value.device
                             for v in model.trainable_variables))
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()
    if loss != loss or loss in (float("inf"), float("-inf")):
        raise HarnessError("loss is not finite (%r) after %d steps"
                           % (loss, args.steps), EXIT_NONFINITE)
    total = batch * args.steps / wall
    out("%d\timages/sec: %.1f\t%.3f" % (args.steps, total, loss))
    out(RULE)
    out("total images/sec: %.2f" % total)
    out(RULE)
    return _fields(args, total, wall, start_unix, devices, cluster, params,
                   loss)


def _step(strategy, model, optimizer, loss_fn, batch):
    """One asynchronous training step, scheduled on a worker."""
    @tf.function
    def step(it):
        def replica(images, labels):
            with tf.GradientTape() as tape:
                logits = model(images, training=True)
                loss = loss_fn(labels, tf.cast(logits, tf.float32))
                loss = loss / float(batch)
            variables = model.trainable_variables
            grads = tape.gradient(loss, variables)
            optimizer.apply_gradients(zip(grads, variables))
            return loss
        images, labels = next(it)
        return strategy.run(replica, args=(images, labels))
    return step


def _fields(args, total, wall, start_unix, devices, cluster, params, loss):
    fields = {
        "value": total, "wall_time_s": wall, "timed_start_unix": start_unix,
        "per_rank_images_per_sec": [total], "per_rank_wall_time_s": [wall],
        "world_size": args.ps_workers, "num_devices": args.ps_workers,
        "rank_source": "local-parameter-servers",
        "backend": "grpc", "gradient_averaging": "none",
        "wall_time_reduction": "coordinator",
        "variable_update": "parameter_server",
        "parameter_servers": args.parameter_servers,
        "variable_devices": devices, "cluster": cluster,
        "formula": "batch_size_per_rank*timed_steps/wall_time_s",
        "global_batch_size": args.batch_size, "params": params,
        "final_loss": loss, "num_classes": NUM_CLASSES,
    }
    return fields

