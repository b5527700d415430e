"""The node a job runs on, as data: sockets, cores and NUMA nodes, GPUs with their NUMA node and compute
capability, each fabric's NICs with theirs, the driver (`node`); which GPUs an image's CUDA can target and
which drivers it needs (`cuda`); where ranks are bound and how many threads fit (`binding`); the GPUDirect
settings a fabric and the GPU<->NIC path allow (`gpudirect`). Pure functions of a system profile or of a
probed inventory; the rules of dlrun.jobcheck hold rendered jobs to it."""
from dlrun.nodemodel.binding import AffinityMap, affinity_map, rank_affinity, ranks_per_numa, threads_per_rank
from dlrun.nodemodel.node import NodeModel, Nics, live_node_model, node_model

__all__ = ["AffinityMap", "NodeModel", "Nics", "affinity_map", "live_node_model", "node_model", "rank_affinity",
           "ranks_per_numa", "threads_per_rank"]
