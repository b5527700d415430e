"""Which GPUs an image's CUDA can target, and which drivers it needs.

A CUDA toolkit compiles native code (SASS) for a range of compute capabilities; a GPU outside that range runs
the image's kernels only through PTX the driver compiles at start-up, where the libraries ship PTX at all
(cuDNN 7 ships no Hopper or Blackwell code): a job on it fails, or runs other code than the run it is
compared with. A toolkit also needs a minimum driver, unless the image carries NVIDIA's forward-compatibility
package (data-center GPUs on the branches it lists).

Each row: the toolkit release, the compute capabilities its nvcc targets (lowest and highest `sm_XY`), and the
minimum Linux x86_64 driver NVIDIA's CUDA Toolkit release notes give for it (Table 3, "CUDA Toolkit and
Corresponding Driver Versions"; 12.6 Update 3 and 12.8 GA checked there, the rest as that table prints them).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

SOURCE = ("NVIDIA CUDA Toolkit release notes (Table 3, toolkit and minimum Linux x86_64 driver; the supported "
          "architectures of each release's nvcc)")


@dataclass(frozen=True)
class CudaRelease:
    version: str        #: major.minor[.patch]: the row applies to this release and its updates unless a row is closer
    lowest_cc: str      #: the oldest architecture its nvcc still targets
    highest_cc: str     #: the newest architecture its nvcc targets
    min_driver: str     #: the Linux x86_64 driver the toolkit release needs


CUDA_RELEASES: tuple[CudaRelease, ...] = (
    CudaRelease("9.0", "3.0", "7.0", "384.81"),        # Volta (sm_70) added; Fermi (sm_2x) dropped
    CudaRelease("9.2", "3.0", "7.2", "396.26"),
    CudaRelease("10.0", "3.0", "7.5", "410.48"),       # Turing (sm_75) added
    CudaRelease("10.1", "3.0", "7.5", "418.39"),       # "10.1.105 general release, and updates"
    CudaRelease("10.2", "3.0", "7.5", "440.33"),
    CudaRelease("11.0", "3.5", "8.0", "450.51.05"),    # Ampere (sm_80) added; sm_30 dropped
    CudaRelease("11.1", "3.5", "8.6", "455.23"),
    CudaRelease("11.8", "3.5", "9.0", "520.61.05"),    # Hopper (sm_90) and Ada (sm_89) added
    CudaRelease("12.0", "5.0", "9.0", "525.60.13"),    # Kepler (sm_3x) dropped
    CudaRelease("12.6", "5.0", "9.0", "560.28.03"),
    CudaRelease("12.6.3", "5.0", "9.0", "560.35.05"),
    CudaRelease("12.8", "5.0", "12.0", "570.26"),      # Blackwell (sm_100, sm_120) added
)


def version_tuple(text: str) -> tuple[int, ...]:
    """`10.0.130` -> (10, 0, 130); `535.129.03` -> (535, 129, 3); the leading numeric parts only."""
    return tuple(int(part) for part in re.findall(r"\d+", text.split("-")[0])[:3])


def release_of(cuda: str) -> CudaRelease | None:
    """The table's row for an image's CUDA: the closest release at or below it (same major version)."""
    mine = version_tuple(cuda)
    rows = [r for r in CUDA_RELEASES if version_tuple(r.version)[0] == mine[0]
            and version_tuple(r.version) <= mine]
    return max(rows, key=lambda r: version_tuple(r.version)) if rows else None


def targets(cuda: str, capability: str) -> bool | None:
    """Whether CUDA `cuda` compiles native code for compute capability `capability` (None: not in the table)."""
    row = release_of(cuda)
    if row is None:
        return None
    return version_tuple(row.lowest_cc) <= version_tuple(capability) <= version_tuple(row.highest_cc)


def first_release_for(capability: str) -> CudaRelease | None:
    """The oldest release in the table that targets `capability`."""
    return next((r for r in CUDA_RELEASES if targets(r.version, capability)), None)


def driver_ok(cuda: str, driver: str, forward_compat: list[str], datacenter: bool) -> tuple[bool | None, str]:
    """(ok, how) for running CUDA `cuda` on `driver`: new enough for the toolkit, or a data-center GPU on a
    branch the image's forward-compatibility package lists (`535.86`: R535 from 535.86; `384`: any R384).
    None when the table has no row for the CUDA."""
    row = release_of(cuda)
    if row is None:
        return None, f"CUDA {cuda} is not in dlrun's table ({SOURCE})"
    have = version_tuple(driver)
    if have >= version_tuple(row.min_driver):
        return True, f"driver {driver} >= {row.min_driver}, CUDA {cuda}'s minimum"
    for entry in forward_compat:
        floor = version_tuple(entry)
        if datacenter and have[:1] == floor[:1] and have >= floor:
            return True, f"driver {driver} is on R{floor[0]}, which the image's CUDA forward-compatibility package takes"
    return False, (f"CUDA {cuda} needs driver >= {row.min_driver}"
                   + (f", or on a data-center GPU one of R{', R'.join(str(version_tuple(e)[0]) for e in forward_compat)}"
                      f" (the image's forward-compatibility package)" if forward_compat else ""))


def is_datacenter(gpu_model: str | None) -> bool:
    """NVIDIA's forward compatibility covers data-center GPUs only, not GeForce (or Quadro/RTX workstation) cards."""
    model = (gpu_model or "").lower()
    return bool(model) and not any(word in model for word in ("geforce", "quadro", "titan"))
