"""Stand-in batch tools for tests that need a job to really run under Slurm, LSF or PBS semantics on this
machine: one script plays sbatch/scontrol/scancel, bsub/bjobs/bkill and qsub/qstat/qdel. The job script
runs in the background like a batch system runs it, in the environment that system would give it: sbatch
and bsub copy the submitter's environment; qsub copies nothing but its own PBS_O_* variables and what the
script names with `#PBS -v` (PBS's rule, so a job that forgets to ask for a variable does not get it)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

FAKE_BATCH = """#!{python}
import os, re, signal, subprocess, sys
tool = os.path.basename(sys.argv[0])
state = os.environ["FAKE_BATCH_STATE"]
os.makedirs(state, exist_ok=True)
def path(name): return os.path.join(state, name)
def finished():
    if os.path.exists(path("killed")):
        return "killed"
    return open(path("exit")).read().strip() if os.path.exists(path("exit")) else None
if tool in ("sbatch", "qsub", "bsub"):
    script = sys.argv[-1] if tool != "bsub" else path("stdin-script.sh")
    if tool == "bsub":
        open(script, "w").write(sys.stdin.read())
    text = open(script).read()
    cwd = os.getcwd()
    if tool == "qsub":
        names = [n for line in re.findall(r"^#PBS -v (.*)$", text, re.M) for n in line.split(",")]
        env = {{k: os.environ[k] for k in ("PATH", "HOME", "FAKE_BATCH_STATE") if k in os.environ}}
        env.update({{n: os.environ[n] for n in names if n in os.environ}})
        env.update(PBS_O_WORKDIR=cwd, PBS_JOBID="7.server")
        out_name = "pbs.out"
    else:
        env = dict(os.environ, SLURM_SUBMIT_DIR=cwd, SLURM_JOB_ID="7", LS_SUBCWD=cwd, LSB_JOBID="7")
        out_name = "slurm-7.out" if tool == "sbatch" else "lsf-7.out"
    out = open(os.path.join(cwd, out_name), "w")
    runner = "bash %s; echo $? > %s" % (subprocess.list2cmdline([script]), path("exit"))
    proc = subprocess.Popen(["bash", "-c", runner], stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                            start_new_session=True)
    open(path("pid"), "w").write(str(proc.pid))
    print({{"sbatch": "7", "qsub": "7.server", "bsub": "Job <7> is submitted to queue <normal>."}}[tool])
elif tool == "scontrol":
    code = finished()
    if code is None:
        print("JobId=7 JobState=RUNNING Reason=None ExitCode=0:0")
    elif code == "killed":
        print("JobId=7 JobState=CANCELLED Reason=None ExitCode=0:15")
    else:
        print("JobId=7 JobState=%s Reason=None ExitCode=%s:0" % ("COMPLETED" if code == "0" else "FAILED", code))
elif tool in ("qstat", "bjobs"):
    code = finished()
    if code == "killed":
        code = "271" if tool == "qstat" else "130"
    if tool == "qstat":
        print("Job Id: 7.server\\n    job_state = %s" % ("F" if code is not None else "R"))
        if code is not None:
            print("    Exit_status = %s" % code)
    else:
        print(("DONE -" if code == "0" else "EXIT %s" % code) if code is not None else "RUN -")
elif tool in ("scancel", "qdel", "bkill"):
    open(path("killed"), "w").write("1")
    try:
        os.killpg(int(open(path("pid")).read()), signal.SIGTERM)
    except ProcessLookupError:
        pass
"""

TOOLS = ("sbatch", "scontrol", "scancel", "qsub", "qstat", "qdel", "bsub", "bjobs", "bkill")

SYSTEM = """name: fake-{scheduler}
description: this machine behind a stand-in {scheduler}
arch: {arch}
nodes: 1
cpu: {{sockets: 1, cores_per_socket: 1}}
memory_gb: 4
fabrics: [tcp]
scheduler: {scheduler}
launcher: none
runtime: host
default_image: host
default_steps: 2
default_warmup_steps: 1
batch_sizes: {{trivial: 4}}
"""


def install(root: Path) -> dict[str, str]:
    """Tools in root/bin and systems fake-slurm, fake-lsf, fake-pbs in root/site; the env that uses them."""
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True)
    fake = bin_dir / "fake-batch"
    fake.write_text(FAKE_BATCH.format(python=sys.executable))
    fake.chmod(0o755)
    for tool in TOOLS:
        (bin_dir / tool).symlink_to(fake)
    systems = root / "site" / "systems"
    systems.mkdir(parents=True)
    for scheduler in ("slurm", "lsf", "pbs"):
        (systems / f"{scheduler}.yaml").write_text(SYSTEM.format(scheduler=scheduler, arch=os.uname().machine))
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "DLRUN_PATH": str(root / "site"),
            "FAKE_BATCH_STATE": str(root / "state")}
