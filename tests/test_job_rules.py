"""Every rendered job held to a model of its node (dlrun.jobcheck, dlrun.nodemodel), property-style.

The cases come from the catalogs: every system of recipes/systems (and localhost) x every image of its
architecture x every registered launcher x every fabric the system has, so a new system, image, launcher or
fabric is checked without a new test. For each combination that resolves and renders:

  * the rules refuse it exactly where an independent reading of the catalogs says they must (an image whose
    CUDA cannot target the GPU, or that has no CUDA at all, on a GPU system) and nowhere else: every other
    render satisfies every rule;
  * the rendered text itself holds what the facts claim (threads, binding map, GPUDirect level, the memlock
    prelude, no `localhost#`, no root-only switch for a site's user);
  * for every rule, a twin of the job's facts that breaks it is refused by that rule: removing a rule's body
    fails this file (tests/test_job_rules.py::test_every_rule_refuses_its_twin_in_every_combination).
"""
from __future__ import annotations

import dataclasses
import json
import functools
import re
import shlex

import pytest
from conftest import REPO
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlrun.catalog import load_catalog
from dlrun.errors import DlrunError
from dlrun.images.verify import with_local_image
from dlrun.jobcheck import RULES, check
from dlrun.jobcheck.facts import ROOT_ONLY_VARS
from dlrun.nodemodel import cuda as cuda_table
from dlrun.nodemodel import node_model
from dlrun.nodemodel.gpudirect import GDR_VARS, farthest_path, gdr_variable
from dlrun.plan import resolve_plan
from dlrun.probe.host import probe_host
from dlrun.registry import LAUNCHERS
from dlrun.render import render_job

WORKLOAD = "resnet50"  # a tf_cnn_benchmarks model and a harness model: every image of a system runs it


@pytest.fixture(autouse=True)
def site_user(monkeypatch):
    """Rendered text must not depend on who runs the tests: a site's user (root is its own case below)."""
    monkeypatch.setenv("DLRUN_HOME", "/nonexistent/dlrun-home")
    monkeypatch.setenv("XDG_CONFIG_HOME", "/nonexistent/xdg-config")
    monkeypatch.delenv("DLRUN_PATH", raising=False)
    monkeypatch.setattr("dlrun.plan.jobuser.effective_uid", lambda: 1000)


@functools.lru_cache(maxsize=1)
def catalog():
    return load_catalog(host=probe_host())


def combinations(system_name: str):
    """(image, launcher, fabric) of one system: images of its architecture, every launcher, its fabrics."""
    system = catalog().system(system_name)
    for image in sorted(catalog().images):
        if system.arch not in catalog().image(image).arch:
            continue
        for launcher in LAUNCHERS.names():
            for fabric in system.fabrics:
                yield image, launcher, fabric


@functools.lru_cache(maxsize=None)
def combination(system: str, image: str, launcher: str, fabric: str):
    """rendered() of one catalog combination, once per session (every test of this file holds the same jobs)."""
    return rendered(system, image, launcher, fabric)


def rendered(system: str, image: str, launcher: str, fabric: str, **options):
    """(plan, job), or None where dlrun refuses the combination before rendering (a launcher of another
    scheduler, a one-rank launcher for many ranks, torchrun on an old PyTorch): no job exists to check."""
    spec = catalog().system(system)
    try:
        plan = resolve_plan(catalog(), WORKLOAD, system=system, image=image, launcher=launcher, fabric=fabric,
                            nodes=options.pop("nodes", min(2, spec.nodes)), local_image=with_local_image, **options)
        return plan, render_job(plan)
    except DlrunError:
        return None


def expected_refusals(plan) -> set[str]:
    """The rules that must refuse this plan, read from the catalogs without dlrun.jobcheck: an image without
    CUDA on GPUs, or whose CUDA (by the table) cannot target the GPU's compute capability."""
    if plan.device != "cuda":
        return set()
    cuda = getattr(plan.image, "cuda", None)
    if cuda is None:  # the host's Python or a site's own image: its CUDA is the node's to tell
        return set()
    version = getattr(cuda, "version", None)
    capability = plan.system.gpus.compute_capability
    if version is None or (capability and cuda_table.targets(version, capability) is False):
        return {"cuda-target"}
    return set()


def exported(script: str) -> dict[str, str]:
    """NAME -> value of the script's own `export NAME=VALUE` lines."""
    env = {}
    for line in script.splitlines():
        match = re.match(r"^export ([A-Za-z_][A-Za-z0-9_]*)=(.*)$", line)
        if match:
            env[match.group(1)] = " ".join(shlex.split(match.group(2))) if match.group(2) else ""
    return env


def assert_text_holds_the_facts(plan, job) -> None:
    """What the facts claim, read back from the rendered text."""
    script, facts = job.script, job.facts
    env = exported(script)
    assert "localhost#" not in script
    if not plan.runs_as_root:
        assert not any(name in script for name in ROOT_ONLY_VARS), "a root-only switch in a site user's job"
    if plan.fabric != "tcp":
        assert "ulimit -l unlimited" in script and "dlrun-memlock" in script
    else:
        assert "dlrun-memlock" not in script
    if "OMP_NUM_THREADS" in env:
        assert int(env["OMP_NUM_THREADS"]) == plan.threads_per_rank <= facts.threads
    numa = re.search(r"numa=\(([0-9 ]*)\)", script)
    if facts.bound_by == "dlrun":
        assert numa and [int(n) for n in numa.group(1).split()][:plan.ranks_per_node] == [
            facts.bound[lr] for lr in range(facts.ranks_per_node)][:len(numa.group(1).split())]
    for name in GDR_VARS:
        if name in env:
            assert facts.env.get(name) == env[name]
    for note in (f.message for f in job.assumptions):
        assert " ".join(note.split()) in script, "every assumption is said in the job"


#: The built-in systems (recipes/systems) and localhost; a site's own entries are not the catalog's to test.
SYSTEMS = sorted([path.stem for path in (REPO / "recipes" / "systems").glob("*.yaml")] + ["localhost"])


@pytest.mark.parametrize("system", SYSTEMS)
def test_every_combination_satisfies_the_rules_or_is_refused_for_its_cuda(system):
    checked = 0
    for image, launcher, fabric in combinations(system):
        found = combination(system, image, launcher, fabric)
        if found is None:
            continue
        plan, job = found
        checked += 1
        refused = {f.rule for f in job.refusals}
        assert refused == expected_refusals(plan), (system, image, launcher, fabric, [f.line() for f in job.refusals])
        assert_text_holds_the_facts(plan, job)
    assert checked, f"no combination of {system} renders"


def _twin(facts, rule: str):
    """The job's facts changed so that they break `rule`, or None where the rule has nothing to hold there."""
    node = facts.node
    if rule == "cpu-threads":
        cores = node.cores if None in facts.bound else min(node.cores_of_numa(n) for n in facts.bound)
        return dataclasses.replace(facts, threads=cores + 1)
    if rule == "gpu-socket":
        if facts.device != "cuda" or facts.one_process_all_gpus or not node.gpu_numa_known():
            return None
        return dataclasses.replace(facts, bound=(None,) * facts.ranks_per_node)
    if rule == "gpudirect":
        if not facts.rdma:
            return dataclasses.replace(facts, env={**facts.env, "NCCL_NET_GDR_LEVEL": "3"}, device="cuda")
        if facts.device == "cuda" and facts.image.nccl_present and farthest_path(node, facts.fabric):
            return dataclasses.replace(facts, env={k: v for k, v in facts.env.items() if k not in GDR_VARS})
        return None
    if rule == "locked-memory":
        return dataclasses.replace(facts, memlock_raised=False) if facts.rdma else None
    if rule == "cuda-target":  # a CUDA too old for the GPU (10.0 stops at 7.5), else an image without CUDA
        if facts.device != "cuda" or node.compute_capability is None:
            return None
        newer = cuda_table.version_tuple(node.compute_capability) > (7, 5)
        return dataclasses.replace(facts, image=dataclasses.replace(facts.image, cuda="10.0.130" if newer else None,
                                                                    cuda_known=True))
    if rule == "container-reference":
        return dataclasses.replace(facts, runs_elsewhere=True, reference="localhost#dlrun/x:x86_64",
                                   reference_kind="registry")
    if rule == "root-only":
        return dataclasses.replace(facts, runs_as_root=False, root_vars=ROOT_ONLY_VARS)
    if rule == "launcher-session":
        return dataclasses.replace(facts, loads_mpi=True, joins_launcher_session=False)
    raise AssertionError(f"no twin for rule {rule}: add one here")


@pytest.mark.parametrize("system", SYSTEMS)
def test_every_rule_refuses_its_twin_in_every_combination(system):
    """Each rule catches the job that breaks it: with any rule's body removed, this fails."""
    held_twins(system)


@pytest.mark.parametrize("rule", sorted(RULES))
def test_a_rule_without_its_body_fails_the_twin_check(rule, monkeypatch):
    """The check above has teeth: TX-GAIA holds every rule to a twin, and one rule that refuses nothing fails."""
    monkeypatch.setitem(RULES, rule, lambda facts: [])
    with pytest.raises(AssertionError):
        held_twins("txgaia")


def held_twins(system: str) -> None:
    held = {rule: 0 for rule in RULES}
    for image, launcher, fabric in combinations(system):
        found = combination(system, image, launcher, fabric)
        if found is None:
            continue
        facts = found[1].facts
        for rule in RULES:
            twin = _twin(facts, rule)
            if twin is None:
                continue
            held[rule] += 1
            refused = [f for f in RULES[rule](twin) if not f.assumption]
            assert refused, (rule, system, image, launcher, fabric)
            assert any(f.rule == refused[0].rule for f in check(twin) if not f.assumption)
    for rule in ("cpu-threads", "container-reference", "root-only", "launcher-session"):
        assert held[rule], f"rule {rule} was held to no twin on {system}"


def test_every_rule_has_a_twin_on_some_seed_system():
    """Across the seed systems each rule meets a job that breaks it (GPU rules on GPU systems, RDMA rules on
    RDMA fabrics)."""
    seen = set()
    for system in SYSTEMS:
        for image, launcher, fabric in combinations(system):
            found = combination(system, image, launcher, fabric)
            if found is not None:
                seen |= {rule for rule in RULES if _twin(found[1].facts, rule) is not None}
    assert seen == set(RULES)


def test_a_job_that_runs_as_root_says_so_only_then():
    as_root = rendered("dgx2", "pytorch1.0-nvcr18.11", "mpirun", "tcp")
    assert as_root is not None and "OMPI_ALLOW_RUN_AS_ROOT" not in as_root[1].script
    plan = as_root[0].model_copy(update={"runs_as_root": True})
    assert "export OMPI_ALLOW_RUN_AS_ROOT=1" in render_job(plan).script and not render_job(plan).refusals


# --------------------------------------------------------------------------------- threads against the cores
GPU_SYSTEMS = [name for name in SYSTEMS if name != "localhost" and "\ngpus:" in
               (REPO / "recipes" / "systems" / f"{name}.yaml").read_text()]


@settings(max_examples=60, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(system=st.sampled_from(GPU_SYSTEMS), data=st.data())
def test_threads_over_the_bound_cores_are_refused_exactly(system, data):
    """--ranks-per-node R and --threads T on a GPU system: refused by cpu-threads exactly when the ranks bound to
    one NUMA node (GPU i on gpus.numa_affinity[i]) run more threads than its cores (sockets x cores per socket
    over NUMA nodes), or, unbound, than the node's cores."""
    spec = catalog().system(system)
    ranks = data.draw(st.integers(1, spec.gpus.count_per_node), label="ranks")
    threads = data.draw(st.integers(1, spec.cpu.cores + 2), label="threads")
    image = spec.default_image
    found = rendered(system, image, spec.launcher, spec.default_fabric if spec.default_fabric != "auto"
                     else spec.fabrics[0], ranks_per_node=ranks, threads=threads, nodes=1)
    if found is None:
        return
    plan, job = found
    if job.facts.one_process_all_gpus:
        return
    numa = spec.gpus.numa_affinity
    per_numa = spec.cpu.cores // spec.cpu.numa_nodes
    if numa:
        counts = [sum(1 for lr in range(ranks) if numa[lr] == n) for n in set(numa[:ranks])]
        over = max(counts) * threads > per_numa
    else:
        over = ranks * threads > spec.cpu.cores
    assert ("cpu-threads" in {f.rule for f in job.refusals}) == over, (ranks, threads)


def test_default_threads_fill_the_bound_cores_without_oversubscribing():
    """The default --threads is the bound set's cores over the ranks bound to it: TX-GAIA's two ranks on
    socket 1 (20 cores) get 10 each; DGX H100's four per socket (56 cores) 14."""
    for system, threads in (("txgaia", 10), ("dgx-h100", 14), ("dgx2", 3), ("ac922", 10), ("summitdev", 5)):
        spec = catalog().system(system)
        plan = resolve_plan(catalog(), WORKLOAD, system=system, nodes=1)
        assert plan.threads_per_rank == threads, system
        assert not [f for f in render_job(plan).refusals if f.rule == "cpu-threads"], system
        assert node_model(spec).cores_of_numa(0) * spec.cpu.numa_nodes == spec.cpu.cores


def test_gdr_variable_is_the_one_the_image_nccl_reads():
    assert gdr_variable("2.3.7") == "NCCL_IB_GDR_LEVEL"
    assert gdr_variable("2.4.7-1") == gdr_variable("2.23.4") == gdr_variable(None) == "NCCL_NET_GDR_LEVEL"


# --------------------------------------------------------------------------------- the acceptance jobs
def test_the_design_card_job_binds_threads_gpudirect_and_locked_memory():
    """`dlrun --image tf1.14-nccl --nodes 8 resnet50 --system txgaia`: two ranks on socket 1 with 10 threads
    each (its 20 cores, not 40 threads), GPUDirect stated with what the paper and NCCL imply, `ulimit -l`
    raised inside the container; the golden file is the job as a site gets it."""
    from golden_files import GOLDEN, assert_golden

    plan = resolve_plan(catalog(), WORKLOAD, system="txgaia", image="tf1.14-nccl", nodes=8,
                        local_image=with_local_image)
    job = render_job(plan)
    assert_golden(GOLDEN / "scripts" / "txgaia-design-card.sh", job.script, what="the design card's job")
    script, env = job.script, exported(job.script)
    assert not job.refusals and plan.threads_per_rank == 10
    assert env["OMP_NUM_THREADS"] == "10" and "#SBATCH --cpus-per-task=10" in script
    assert "numa=(1 1)" in script and "--num_intra_threads=10" in script
    assert env["NCCL_NET_GDR_LEVEL"] == "5" and "PSM2_CUDA" not in env  # the image's PSM2 has no CUDA
    assert "# dlrun: GPUDirect: the opa NIC is on the other socket (SYS" in script
    assert "GPUDirect RDMA ran over this fabric (Samsi et al." in script
    assert "# dlrun: PSM2: the image's PSM2 is built without CUDA" in script
    last = script.strip().splitlines()[-1]
    sif = last.index("tf1.14-nccl.sif")
    assert last.index("ulimit -l unlimited") > sif  # inside the container
    assert "OMPI_ALLOW_RUN_AS_ROOT" not in script
    roce = render_job(resolve_plan(catalog(), WORKLOAD, system="txgaia", image="tf1.14-nccl", nodes=8, fabric="roce",
                                   local_image=with_local_image))
    assert exported(roce.script)["NCCL_NET_GDR_LEVEL"] == "3" and not roce.refusals


@pytest.mark.parametrize("system,image,cuda,gpu,capability", [
    ("dgx-h100", "pytorch1.0-nvcr18.11", "10.0.130", "H100", "9.0"),
    ("dgx-b200", "tf1.14-nccl", "10.0.130", "B200", "10.0"),
])
def test_an_image_whose_cuda_cannot_target_the_gpu_is_refused_in_one_line(dlrun_home, system, image, cuda, gpu,
                                                                           capability):
    from conftest import run_cli

    proc = run_cli("run", WORKLOAD, "--system", system, "--image", image, "--dry-run")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and proc.stdout == ""
    assert lines[0].startswith("dlrun: error: refusing to run: rule cuda-target: ")
    assert f"CUDA {cuda}" in lines[0] and gpu in lines[0] and f"compute capability {capability}" in lines[0]
    skipped = run_cli("run", WORKLOAD, "--system", system, "--image", image, "--dry-run", "--skip-checks")
    assert skipped.returncode == 0 and "warn: check rule cuda-target skipped (--skip-checks)" in skipped.stderr


def test_the_current_image_on_dgx_h100_passes(dlrun_home):
    from conftest import run_cli

    proc = run_cli("run", WORKLOAD, "--system", "dgx-h100", "--image", "pytorch2.6-ngc24.12", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "--container-image=" in proc.stdout and "localhost#" not in proc.stdout


# --------------------------------------------------------------------------------- the memlock prelude, run
def test_the_memlock_prelude_stops_a_rank_that_cannot_lock_memory_and_runs_one_that_can(tmp_path):
    """Run for real: a hard limit of 8 MiB (any user may lower its own) stops the rank with one line before it
    starts; where `ulimit -l` says unlimited, the rank's command runs."""
    import subprocess

    from conftest import UNLIMITED_MEMLOCK_ENV

    from dlrun.render import memlock_argv
    from dlrun.shell import join

    plan = resolve_plan(catalog(), WORKLOAD, system="txgaia", nodes=1)
    argv = memlock_argv(plan) + ["echo", "rank ran"]
    assert memlock_argv(resolve_plan(catalog(), WORKLOAD, system="aws-p3dn", nodes=1)) == []  # plain TCP
    limited = ["bash", "-c", 'ulimit -S -l 8192 && ulimit -H -l 8192 && exec "$@"', "limit", *argv]
    stopped = subprocess.run(["bash", "-c", join(limited)], capture_output=True, text=True, timeout=30)
    assert stopped.returncode == 1 and stopped.stdout == ""
    assert stopped.stderr.startswith("dlrun: locked memory is limited to 8192 KiB here; fabric opa ")
    ran = subprocess.run(["bash", "-c", join(argv)], capture_output=True, text=True, timeout=30,
                         env={"PATH": "/usr/bin:/bin", **UNLIMITED_MEMLOCK_ENV})
    assert ran.returncode == 0 and ran.stdout == "rank ran\n", ran.stderr


def test_ranks_bind_to_the_nic_socket_where_the_profile_places_only_the_nic():
    """A profile that knows its InfiniBand NIC's NUMA node but not its GPUs': the ranks are bound there, and the
    job says why."""
    from matrix_catalog import MATRIX_SYSTEM, matrix_catalog

    from dlrun.catalog.loader import Catalog
    from dlrun.catalog.models import FabricConfig

    gpus = MATRIX_SYSTEM.gpus.model_copy(update={"numa_affinity": None})
    fabrics = {**MATRIX_SYSTEM.fabric_config, "ib": FabricConfig(hca=["mlx5_0:1"], numa_affinity=[1])}
    system = MATRIX_SYSTEM.model_copy(update={"name": "nic-only", "gpus": gpus, "fabric_config": fabrics})
    base = matrix_catalog()
    cat = Catalog(images=base.images, workloads=base.workloads, systems={**base.systems, "nic-only": system})
    plan = resolve_plan(cat, "trivial", system="nic-only", fabric="ib", nodes=2, ranks_per_node=2,
                        local_image=with_local_image)
    job = render_job(plan)
    assert "numa=(1 1)" in job.script and plan.threads_per_rank == 4  # 8 cores of NUMA node 1 over 2 ranks
    assert "to the ib NIC's NUMA node (the profile does not place the GPUs; it places the NIC)" in job.script
    assert not job.refusals
    tcp = render_job(resolve_plan(cat, "trivial", system="nic-only", fabric="tcp", nodes=2, ranks_per_node=2,
                                  local_image=with_local_image))
    assert "numa=()" in tcp.script and "assumes (gpu-socket)" in tcp.script  # nothing known to bind to


def test_the_assumptions_are_recorded_with_the_run(tmp_path):
    """What the job says it assumes is in the run's provenance (and so in the store's row)."""
    import json

    from dlrun.execute.stage import stage

    plan = resolve_plan(catalog(), WORKLOAD, system="txgaia", image="tf1.14-nccl", nodes=2,
                        local_image=with_local_image)
    job = render_job(plan)
    run, provenance, _ = stage(plan, job, tmp_path / "runs", None)
    recorded = json.loads((run.path / "provenance.json").read_text())["job_assumptions"]
    assert recorded == provenance["job_assumptions"] == [{"rule": a.rule, "assumes": a.message}
                                                         for a in job.assumptions]
    assert {a["rule"] for a in recorded} >= {"cuda-driver", "container-reference", "gpudirect"}


def test_doctor_shows_the_node_model_it_checked(dlrun_home):
    from conftest import run_cli

    proc = run_cli("doctor", "--system", "txgaia", "--json")
    checks = {c["check"]: c for c in json.loads(proc.stdout)["checks"]}
    assert checks["node-model"]["level"] == "ok" and "locked memory" in checks["node-model"]["message"]
    assert checks["node-model"]["message"].startswith("this node: ")


def test_no_golden_job_points_the_nodes_at_a_registry_of_this_machine():
    """Every rendered job kept as a golden file: none sends pyxis to `localhost#` (a registry that is each
    compute node itself), and none sets Open MPI's root switches unless its job runs as root (a pod)."""
    from pathlib import Path

    goldens = sorted(p for p in (Path(__file__).parent / "golden").rglob("*") if p.is_file())
    assert len(goldens) >= 20
    for path in goldens:
        text = path.read_text(errors="replace")
        assert "localhost#" not in text, path
        if "OMPI_ALLOW_RUN_AS_ROOT" in text:
            assert "kubernetes" in path.name or "runAsUser: 0" in text or "root" in text.lower(), path
