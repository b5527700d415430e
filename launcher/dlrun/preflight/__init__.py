"""Checks before a run: a Plan against this node (tools, MPI pairs, fabrics, GPUs, daemons, image digests).

An `error` finding refuses the run with the reason and the fix (`--skip-checks` runs anyway, for a submit
host that is not a compute node). The rule that matters most: in the hybrid model the host's mpirun starts
ranks that use the image's MPI, and a different MPI flavour, release series or PMI makes every rank believe
it is rank 0, or hangs; refuse that pair before anything starts.
"""
from dlrun.preflight.checks import preflight
from dlrun.preflight.findings import Finding, PreflightError, findings_json, refuse_on_errors
from dlrun.preflight.inventory import doctor_report, node_inventory

__all__ = ["Finding", "PreflightError", "doctor_report", "findings_json", "node_inventory", "preflight",
           "refuse_on_errors"]
