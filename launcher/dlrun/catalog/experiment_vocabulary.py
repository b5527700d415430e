"""The fixed vocabularies of experiments: the axes a paper can sweep and the metrics a reference can name."""
from __future__ import annotations

#: What each axis sweeps, and what its dlrun value is.
AXES: dict[str, str] = {
    "model": "workload name: the model trained (or counted)",
    "collective": "workload name: the collective measured",
    "application": "workload name: an HPC application run in place of training",
    "gpus": "devices in the run, all nodes together (one rank per GPU)",
    "nodes": "nodes in the run",
    "ranks_per_node": "ranks (workers) per node",
    "cpu_cores": "CPU cores in the run, one rank per core",
    "fabric": "dlrun fabric: ib, opa, roce or tcp",
    "partition": "a partition of the system (one of its `partitions`, or its own scheduler_options.partition): "
                 "the point runs on that partition's nodes, as `dlrun run --partition` does; a GPU experiment's "
                 "point on a partition without GPUs runs on its CPUs",
    "precision": "dlrun precision: fp32, or amp (fp16 autocast on GPUs, bf16 on CPUs)",
    "batch_per_device": "samples per rank per step",
    "batch_per_node": "samples per node per step (divided over the node's ranks)",
    "data_workers": "data-loader processes per rank (Ren et al.'s j)",
    "parameter_servers": "parameter-server processes (TensorFlow's ps jobs)",
    "allreduce_strategy": "tf_cnn_benchmarks --variable_update, and after a colon its --all_reduce_spec "
                          "(e.g. horovod, collective_all_reduce:collective#2)",
    "parallelism": "how ranks share the model: ddp (DistributedDataParallel, one process per GPU) or "
                   "dataparallel (torch.nn.DataParallel, one process)",
    "framework": "training framework",
    "storage": "file system the training data is read from",
    "data_format": "on-disk format of the training data",
    "data": "synthetic or real input data",
    "phase": "training phase (pre-training, fine-tuning)",
    "pcie_affinity": "which CPU socket each PCIe card is attached to",
    "link": "device pair whose link is measured",
    "gpu_model": "GPU under test",
}
WORKLOAD_AXES = ("model", "collective", "application")
COUNT_AXES = ("gpus", "nodes", "ranks_per_node", "cpu_cores", "batch_per_device", "batch_per_node",
              "data_workers", "parameter_servers")

#: Metrics a reference may name. dlrun's results carry MEASURED_METRICS; the others stay references
#: (with their quotes) that compare reports as not measured.
METRICS: dict[str, str] = {
    "throughput": "training samples per second, all ranks together (images/s, instances/s)",
    "busbw": "collective bus bandwidth at the largest message, GB/s (nccl-tests definition)",
    "params": "trainable parameters of the model",
    "forward_macs": "multiply-adds of one forward pass per sample (convolutions and fully connected layers)",
    "time_to_train": "wall time to train to the stated epochs or accuracy",
    "time_per_epoch": "wall time of one epoch",
    "accuracy_top1": "top-1 validation accuracy",
    "accuracy_top5": "top-5 validation accuracy",
    "auroc": "area under the ROC curve per pathology",
    "comm_fraction": "share of active GPU time spent in communication",
    "comm_time": "time spent in communication",
    "compute_time": "time spent in computation",
    "cpu_frequency": "CPU core clock during the run",
    "ipc": "CPU instructions per cycle",
    "gpu_utilization": "GPU busy share",
    "gpu_io_utilization": "share of GPU time in copies (GPU-GPU, CPU-GPU)",
    "gpu_memory": "GPU memory in use",
    "read_bandwidth": "sequential read bandwidth of a file, GB/s (a storage workload's)",
    "file_read_rate": "small files opened, read whole and closed per second (a storage workload's)",
    "training_time_spread": "difference between the shortest and the longest training time of repeats",
    "link_bandwidth": "measured point-to-point bandwidth of one link",
    "link_volume": "data moved over links during one epoch",
    "checkpoint_time": "time to write one checkpoint",
    "mfu": "model FLOP utilisation: the model's FLOPs per second over the devices' dense peak (a document's own "
           "FLOP count and peak)",
}
MEASURED_METRICS = frozenset({"throughput", "busbw", "params", "forward_macs", "read_bandwidth", "file_read_rate"})

#: What an experiment's text may say dlrun can or cannot do (`status.requires`, a deviation's `lacks`): fixed
#: names, and families written FAMILY:NAME. Whether dlrun has each is derived from its code by
#: `dlrun.catalog.capabilities`, so a status or deviation that names one cannot go stale unnoticed.
CAPABILITIES: dict[str, str] = {
    "real-data": "training the image models on a dataset read from --data DIR (JPEG ImageFolder or TFRecord "
                 "shards) instead of synthetic tensors",
    "system-storage": "system profiles that name their file systems, so that a run records which one its data "
                      "was read from",
    "parallelism-axis": "experiment points that choose --dist from their parallelism axis, with a DataParallel "
                        "process over the point's GPU count (not always all of its node's GPUs)",
}
CAPABILITY_FAMILIES: dict[str, str] = {
    "workload": "the workload NAME exists in the catalog",
    "collective": "the harness measures the collective NAME (its --benchmark)",
    "dist": "the PyTorch harness distributes training as NAME (its --dist)",
    "data-format": "the PyTorch harness reads datasets in the format NAME",
    "metric": "dlrun stores results of the metric NAME",
    "precision": "`dlrun run --precision NAME` exists and the PyTorch harness computes in it",
}


def capability_problem(name: str) -> str | None:
    """Why `name` is no capability an experiment may name, or None."""
    family, sep, member = name.partition(":")
    if (not sep and name in CAPABILITIES) or (sep and family in CAPABILITY_FAMILIES and member):
        return None
    return (f"unknown capability {name!r}; valid: {', '.join(CAPABILITIES)}, or FAMILY:NAME with FAMILY one of "
            f"{', '.join(CAPABILITY_FAMILIES)}")
