"""Finishing a run: parse its output, decide its status, write status/result files, publish the run
directory and store the run with its provenance."""
from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlrun.execute.rundir import RunDir
from dlrun.fabrics import check_nccl_transport
from dlrun.images.verify import image_provenance
from dlrun.job import RenderedJob
from dlrun.paths import harness_hashes, source_root
from dlrun.plan import Plan
from dlrun.results.parsers import ParseError, parse_text
from dlrun.results.site import local_site
from dlrun.results.store import Store


@dataclass
class RunRecord:
    id: str
    path: Path
    status: str  # ok | failed | cancelled
    exit_code: int | None
    result: dict[str, Any] | None = None
    reason: str | None = None
    tail: list[str] = field(default_factory=list)


def _git_commit() -> str | None:
    """The commit of the source tree dlrun runs from (None for an installed wheel)."""
    root = source_root()
    if root is None or not (root / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def provenance(plan: Plan) -> dict[str, Any]:
    # A container's harness files are hashed when its image is built (the image lock); the host runs them
    # from this machine, so they are hashed here.
    digest, per_file = (harness_hashes(Path(plan.image.harness_dir), plan.workload.framework)
                        if plan.image.kind == "host" else (None, None))
    return {
        "dlrun_git_commit": _git_commit(),
        "image": plan.image.name,
        "image_digest": plan.image.digest,
        "image_uri": plan.image.uri,
        "harness_sha256": digest,
        "harness_files_sha256": per_file,
        **image_provenance(plan),  # the pre-run digest check of the image the runtime used
    }


def _rank_log_texts(run_path: Path) -> str:
    texts = []
    logs = run_path / "logs"
    if logs.is_dir():
        for path in sorted(logs.rglob("*")):
            if path.is_file():
                texts.append(path.read_text(errors="replace"))
    return "\n".join(texts)


def parse_first(texts: list[str]) -> tuple[dict[str, Any] | None, Any, str | None]:
    """(result dict, parsed, error) from the first text holding a result."""
    error = None
    for text in texts:
        try:
            parsed = parse_text(text)
            return parsed.to_dict(), parsed, None
        except ParseError as exc:
            error = str(exc)
    return None, None, error


def finish(plan: Plan, rendered: RenderedJob, run: RunDir, store: Store, *, status: str, reason: str | None,
            exit_code: int | None, started: float, env_capture: dict[str, Any], result_texts: list[str],
            tail: list[str], extra: dict[str, Any] | None = None) -> RunRecord:
    finished = time.time()
    result = None
    if status not in ("cancelled",):
        if exit_code == 0:
            result, parsed, error = parse_first(result_texts)
            if result is not None:
                status = "ok"
                if parsed.num_devices != plan.world_size:
                    status = "failed"
                    reason = (f"the job reported world size {parsed.num_devices}, "
                              f"but the plan has {plan.world_size} ranks")
            else:
                status, reason = "failed", f"the job exited 0 but {error}"
        elif reason is None:
            last = (tail or ["(no output)"])[-1]
            status, reason = "failed", f"exit code {exit_code}: {last}"

    nccl = None
    if plan.device == "cuda":
        text = "\n".join(result_texts) + "\n" + _rank_log_texts(run.path)
        ok, why, nccl = check_nccl_transport(plan.fabric, text, plan.nodes)
        run.write_json("nccl.json", {"fabric": plan.fabric, "ok": ok, "reason": why, **nccl})
        if not ok and status == "ok":
            status, reason = "failed", why

    if result is not None:
        run.write_json("result.json", result)
    run.write_json("status.json", {"state": status, "exit_code": exit_code, "reason": reason,
                                   "started_at": started, "finished_at": finished,
                                   "duration_s": round(finished - started, 3), **(extra or {})})
    final = run.publish()

    record = {
        "id": run.run_id,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(finished)),
        "status": status,
        "workload": plan.workload.name, "model": plan.workload.model,
        "image": plan.image.name, "image_digest": plan.image.digest,
        "system": plan.system.name, "scheduler": plan.scheduler, "launcher": plan.launcher,
        "runtime": plan.runtime, "fabric": plan.fabric,
        "nodes": plan.nodes, "ranks_per_node": plan.ranks_per_node, "world_size": plan.world_size,
        "batch_size": plan.batch_size if plan.workload.trains else None,  # allreduce trains nothing
        "precision": plan.precision,
        "run_dir": str(final),
        "site": local_site(), "origin": "local",  # the comparability key is computed by the store
        "plan": plan.summary(),
        "provenance": {**provenance(plan), "hostname": env_capture["hostname"], "argv": env_capture["argv"],
                       "mpi": env_capture["mpi"], "exit_code": exit_code, "reason": reason,
                       **({"nccl": nccl} if nccl else {}), **(extra or {})},
    }
    rows = [result] if result and status == "ok" else []
    store.add_run(record, rows)
    return RunRecord(id=run.run_id, path=final, status=status, exit_code=exit_code, result=result,
                     reason=reason, tail=tail[-10:])
