"""Everything dlrun learns by looking at the host: CPUs and memory, GPUs (`nvidia-smi`, called once per
process), PCI/NUMA placement, fabrics from sysfs, tools on PATH and their versions, the MPI flavour.

The only package that reads /proc, /sys or runs probing commands; every function takes the filesystem root
(`/` by default, a fake tree in tests) where it reads files. Results are plain data (dicts, dataclasses).
"""
