"""GPUDirect RDMA settings from the node model: the level NCCL may use it at, and PSM2's GPU-buffer settings.

NCCL uses GPUDirect RDMA between a GPU and a NIC no farther apart than NCCL_NET_GDR_LEVEL (named
NCCL_IB_GDR_LEVEL before NCCL 2.4.0). Its documented default is PXB (2: "connected through PCI switches"), so
a NIC that sits on the GPU's CPU without a PCIe switch (PHB) or on the other socket (SYS) gets no GPUDirect
unless the job asks: NCCL then stages every message through host memory. The integers 0 (LOC: never), 3
(PHB: through the CPU's root complex) and 5 (SYS: across the socket interconnect) mean the same in NCCL 2.3
and 2.4 and in later releases, which read values above 4 as SYS (NCCL docs/env.rst, "Integer Values").

PSM2 (Omni-Path) takes GPU buffers only when built with CUDA (PSM2_CUDA=1; PSM2_GPUDIRECT=1 for GPUDirect
RDMA, which also needs a CUDA-enabled hfi1 driver; Open MPI's CUDA notes, PSM2 >= 10.2.175).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from dlrun.nodemodel.cuda import version_tuple
from dlrun.nodemodel.node import PATHS, NodeModel

#: NCCL_NET_GDR_LEVEL's integers dlrun renders, and the path each allows (docs/env.rst).
LEVELS = {"LOC": 0, "PHB": 3, "SYS": 5}
LEVEL_PATH = {0: "LOC", 1: "PIX", 2: "PXB", 3: "PHB", 4: "SYS", 5: "SYS"}
GDR_VARS = ("NCCL_NET_GDR_LEVEL", "NCCL_IB_GDR_LEVEL")
PSM2_GPU_VARS = ("PSM2_CUDA", "PSM2_GPUDIRECT")


@dataclass(frozen=True)
class GpuDirect:
    env: dict[str, str] = field(default_factory=dict)
    path: str | None = None          #: the farthest GPU<->NIC path of the node on this fabric (None: not known)
    level: int | None = None         #: the NCCL level rendered (None: NCCL's default decides)
    notes: tuple[str, ...] = ()      #: what the job says about it (comments)


def gdr_variable(nccl: str | None) -> str:
    """NCCL_IB_GDR_LEVEL for NCCL < 2.4.0, NCCL_NET_GDR_LEVEL from 2.4.0 (and where the version is unknown)."""
    return "NCCL_IB_GDR_LEVEL" if nccl and version_tuple(nccl)[:2] < (2, 4) else "NCCL_NET_GDR_LEVEL"


def farthest_path(node: NodeModel, fabric: str) -> str | None:
    paths = [node.gpu_nic_path(fabric, gpu) for gpu in range(node.gpus)]
    if not paths or None in paths:
        return None
    return max(paths, key=PATHS.index)  # type: ignore[arg-type]


def _level(path: str, gpudirect: bool | None, source: str) -> tuple[int, str]:
    """(level, why) for a known path and what the profile says of GPUDirect on the fabric (`source`: where)."""
    if gpudirect is False:
        return 0, f"the profile says GPUDirect RDMA does not work on this fabric{source}"
    if path == "SYS" and not gpudirect:
        return 0, ("across the socket interconnect NCCL's default does not use it either, and the profile does "
                   "not say the site does")
    return LEVELS["PHB" if path != "SYS" else "SYS"], (f"GPUDirect RDMA ran over this fabric{source}" if gpudirect
                                                       else "as far as the path allows")


def nccl_gpudirect(node: NodeModel, fabric: str, nccl: str | None, source: str = "") -> GpuDirect:
    """The NCCL GPUDirect level for a GPU job on an RDMA fabric, with what the job says about it (`source`: where
    the profile's `gpudirect` comes from, e.g. " (Samsi et al., Sec. II-C)")."""
    var = gdr_variable(nccl)
    nics = node.nics.get(fabric)
    path = farthest_path(node, fabric)
    if path is None:  # the gpudirect rule states it as an assumption
        return GpuDirect()
    level, why = _level(path, nics.gpudirect if nics else None, source)
    if path == "PHB":
        said = (f"GPUDirect: the {fabric} NIC is on the GPU's socket (PHB through the CPU, or PIX/PXB where a PCIe "
                f"switch joins them); NCCL's default (PXB) uses GPUDirect RDMA only behind a switch and stages "
                f"everything else through host memory")
    else:
        said = (f"GPUDirect: the {fabric} NIC is on the other socket (SYS: across the socket interconnect); "
                f"NCCL's default (PXB) does not use GPUDirect RDMA there and stages every message through host memory")
    said += (f"; {var}={level} ({LEVEL_PATH[level]}): {why}; the level is dlrun's, from the path (no source names "
             "an NCCL setting)")
    return GpuDirect(env={var: str(level)}, path=path, level=level, notes=(said,))


def psm2_gpu_env(psm2_cuda: bool | None, gpudirect: bool | None) -> tuple[dict[str, str], str]:
    """PSM2's GPU-buffer settings for an Omni-Path GPU job, and what the job says about them (`psm2_cuda` None:
    the image does not say)."""
    if psm2_cuda is None:
        return {}, ("PSM2: the image does not say whether its PSM2 is built with CUDA, so PSM2_CUDA and PSM2_GPUDIRECT "
                    "are not set and MPI's GPU buffers over Omni-Path are staged through host memory")
    if not psm2_cuda:
        return {}, ("PSM2: the image's PSM2 is built without CUDA, so MPI's GPU buffers over Omni-Path are staged "
                    "through host memory (PSM2_CUDA and PSM2_GPUDIRECT need Intel's CUDA build of PSM2 and hfi1)")
    env = {"PSM2_CUDA": "1"}
    if gpudirect is not False:
        env["PSM2_GPUDIRECT"] = "1"
    return env, "PSM2: CUDA-enabled PSM2 takes GPU buffers" + (" with GPUDirect RDMA" if "PSM2_GPUDIRECT" in env
                                                                 else "")
