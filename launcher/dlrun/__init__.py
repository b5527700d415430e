"""dlrun: run reference deep-learning workloads like-for-like on any HPC system."""

__version__ = "0.1.0"
