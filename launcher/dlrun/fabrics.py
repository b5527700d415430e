"""Interconnects as data: what each fabric needs (devices, NCCL/UCX/libfabric env, OpenMPI MCA settings),
and the check that NCCL really used the fabric a run asked for.

Pure functions of a system profile's `FabricConfig`; finding fabrics on a node is `dlrun.probe.fabric_devices`.
Where a value can only be known on the compute node (the RoCE v2 GID index when the profile does not pin
it) the settings carry a shell snippet that picks it there at job start, with the same rule as
`dlrun.probe.fabric_devices.pick_roce_gid_index`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from dlrun.catalog.models import FabricConfig
from dlrun.errors import unknown_name
from dlrun.probe.fabric_devices import FABRIC_ORDER, VIRTUAL_IF_PREFIXES
from dlrun.shell import Expand

FABRICS = FABRIC_ORDER
DESCRIPTIONS = {
    "ib": "InfiniBand verbs (NCCL NET/IB, UCX rc)",
    "opa": "Intel Omni-Path (PSM2 through libfabric: FI_PROVIDER=psm2)",
    "roce": "RDMA over Converged Ethernet v2 (verbs over Ethernet, GID index from the sysfs GID table)",
    "tcp": "plain TCP sockets (NCCL_IB_DISABLE=1)",
}
# Interfaces NCCL must never pick for inter-node traffic. NCCL matches prefixes after `^`.
NCCL_IFNAME_EXCLUDE = "^" + ",".join(VIRTUAL_IF_PREFIXES)
GID_VAR = "DLRUN_ROCE_GID_INDEX"


@dataclass(frozen=True)
class FabricSettings:
    """Everything a launch needs for one fabric."""

    name: str
    env: dict[str, str] = field(default_factory=dict)   # rank environment (NCCL_*, UCX_*, FI_*, GLOO_*)
    mca: dict[str, str] = field(default_factory=dict)   # OpenMPI MCA parameters (`-mca k v` or OMPI_MCA_k)
    devices: list[str] = field(default_factory=list)    # host device paths containers must see
    setup: list[str] = field(default_factory=list)      # shell lines to run on the first node before launch
    ipc_lock: bool = False                              # RDMA needs locked memory (memlock, IPC_LOCK)


def check_fabric_name(name: str) -> str:
    if name not in FABRICS:
        raise unknown_name("fabric", name, FABRICS)
    return name


def _hca_devices(config: FabricConfig) -> list[str]:
    return [hca.split(":")[0] for hca in config.hca]


def fabric_settings(name: str, config: FabricConfig | None = None, *, device: str = "cpu") -> FabricSettings:
    """Settings for `name` given what the system profile says about it (HCA names, interfaces, GID index)."""
    check_fabric_name(name)
    config = config or FabricConfig()
    env: dict[str, str] = {}
    mca: dict[str, str] = {}
    devices: list[str] = []
    setup: list[str] = []
    ifname = ",".join(config.interfaces) if config.interfaces else None
    env["NCCL_SOCKET_IFNAME"] = ifname or NCCL_IFNAME_EXCLUDE
    if config.interfaces:
        # gloo (the CPU backend) binds to one named interface; it has no exclusion syntax.
        env["GLOO_SOCKET_IFNAME"] = config.interfaces[0]

    if name == "tcp":
        env["NCCL_IB_DISABLE"] = "1"
        mca.update({"pml": "ob1", "btl": "^openib"})
        if config.interfaces:
            mca["btl_tcp_if_include"] = ifname  # type: ignore[assignment]
        else:
            mca["btl_tcp_if_exclude"] = "lo,docker0,virbr0"
        return FabricSettings(name=name, env=env, mca=mca)

    devices.append("/dev/infiniband")
    if name in ("ib", "roce"):
        env["NCCL_IB_DISABLE"] = "0"
        if config.hca:
            env["NCCL_IB_HCA"] = ",".join(config.hca)
            env["UCX_NET_DEVICES"] = ",".join(config.hca)
        tls = ["rc", "sm", "self"] if device == "cpu" else ["rc", "sm", "self", "cuda_copy", "cuda_ipc"]
        env["UCX_TLS"] = ",".join(config.ucx_tls or tls)
        mca.update({"pml": "ucx", "osc": "ucx", "btl": "^openib"})
        if name == "roce":
            if isinstance(config.gid_index, int):
                gid = str(config.gid_index)
            else:
                setup.append(roce_gid_shell(_hca_devices(config)))
                gid = Expand("${" + GID_VAR + "}")
            env["NCCL_IB_GID_INDEX"] = gid
            env["UCX_IB_GID_INDEX"] = gid
    else:  # opa
        hfis = _hca_devices(config) or ["hfi1_0"]
        devices += [f"/dev/{hfi}" for hfi in hfis]
        env.update({"FI_PROVIDER": "psm2", "NCCL_IB_DISABLE": "0"})
        if config.hca:
            env["NCCL_IB_HCA"] = ",".join(config.hca)
        if device == "cuda":
            env["PSM2_CUDA"] = "1"  # CUDA-aware PSM2 (GPUDirect over Omni-Path)
        mca.update({"pml": "cm", "mtl": "ofi", "mtl_ofi_provider_include": "psm2", "btl": "^openib"})
    return FabricSettings(name=name, env=env, mca=mca, devices=devices, setup=setup, ipc_lock=True)


def roce_gid_shell(hcas: list[str]) -> str:
    """A shell snippet that sets DLRUN_ROCE_GID_INDEX on the node, by the rule of `pick_roce_gid_index`.
    `DLRUN_SYSFS_ROOT` (default empty) lets tests point it at a fake tree."""
    devices = " ".join(hcas) if hcas else '"${DLRUN_SYSFS_ROOT:-}"/sys/class/infiniband/*'
    body = (
        f'{GID_VAR}=""; dlrun_fallback=""; dlrun_devs=({devices}); '
        'for dlrun_dev in "${dlrun_devs[@]}"; do '
        'dlrun_dev=${dlrun_dev##*/}; '
        'for dlrun_port in "${DLRUN_SYSFS_ROOT:-}/sys/class/infiniband/${dlrun_dev}/ports/"*; do '
        '[ "$(cat "${dlrun_port}/link_layer" 2>/dev/null)" = Ethernet ] || continue; '
        "dlrun_i=0; "
        'while [ -e "${dlrun_port}/gids/${dlrun_i}" ]; do '
        'dlrun_type=$(cat "${dlrun_port}/gid_attrs/types/${dlrun_i}" 2>/dev/null || true); '
        'dlrun_gid=$(cat "${dlrun_port}/gids/${dlrun_i}" 2>/dev/null || true); '
        'if [ "${dlrun_type,,}" = "roce v2" ] && [ -n "${dlrun_gid//[0:]/}" ]; then '
        'case "${dlrun_gid,,}" in '
        f'0000:0000:0000:0000:0000:ffff:*) {GID_VAR}=${{dlrun_i}}; break 3 ;; '
        'fe80:*) ;; '
        '*) [ -n "${dlrun_fallback}" ] || dlrun_fallback=${dlrun_i} ;; '
        "esac; fi; "
        "dlrun_i=$((dlrun_i + 1)); "
        "done; done; done; "
        f'{GID_VAR}=${{{GID_VAR}:-${{dlrun_fallback}}}}; '
        f'if [ -z "${{{GID_VAR}}}" ]; then '
        "echo 'dlrun: no RoCE v2 GID on this node; set fabric_config.roce.gid_index in the system profile' >&2; "
        "exit 1; fi; "
        f"export {GID_VAR}"
    )
    return body


# ------------------------------------------------------------------------------------ NCCL transport check
NCCL_CHOSEN = re.compile(r"NCCL INFO Using network (?P<net>\S+(?: Libfabric)?)")
NCCL_NET_INIT = re.compile(r"NCCL INFO NET/(?P<net>\w+)\s*:\s*Using")
# bounded: `.*` would rescan the rest of a long line from every `Channel` on it (a rank's output is input)
NCCL_CHANNEL_VIA = re.compile(r"NCCL INFO Channel [^\n]{0,400}? via NET/(?P<net>\w+)")
RDMA_NETS = {"IB", "OFI", "AWS Libfabric", "Libfabric"}


def nccl_transports(text: str) -> dict[str, Any]:
    """Which inter-node transport NCCL chose, from NCCL_DEBUG=INFO output of any number of ranks.

    `Using network X` is NCCL's own statement of its choice; older releases print only
    `NET/X : Using [0]dev`, which is used when the statement is missing. `via NET/X` on a channel line
    is the transport a ring or tree really uses between nodes."""
    chosen: set[str] = set()
    initialised: set[str] = set()
    channels: set[str] = set()
    for line in text.splitlines():
        if "NCCL INFO" not in line:
            continue
        for pattern, bucket in ((NCCL_CHOSEN, chosen), (NCCL_NET_INIT, initialised), (NCCL_CHANNEL_VIA, channels)):
            match = pattern.search(line)
            if match:
                bucket.add(match.group("net"))
    networks = chosen or initialised
    return {"networks": sorted(networks), "net_channels": sorted(channels),
            "seen": bool(chosen or initialised or channels)}


def check_nccl_transport(fabric: str, text: str, nodes: int) -> tuple[bool, str | None, dict[str, Any]]:
    """(ok, reason, facts): a run configured for ib/opa/roce whose ranks used NET/Socket failed."""
    facts = nccl_transports(text)
    if fabric == "tcp" or not facts["seen"]:
        return True, None, facts
    socket_chosen = "Socket" in facts["networks"] and not set(facts["networks"]) & RDMA_NETS
    used_socket = "Socket" in facts["net_channels"] or (socket_chosen and nodes > 1)
    if used_socket:
        return False, (f"fabric {fabric} was configured but NCCL used NET/Socket (plain TCP): the RDMA devices "
                       "were not usable by the ranks (check the container's device binds, NCCL_IB_HCA and "
                       "that the HCA port is ACTIVE)"), facts
    return True, None, facts
