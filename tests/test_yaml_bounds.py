"""YAML alias bombs (issue 36, break 4): a kilobyte file of nine levels of nine aliases each stands for 9**9
values. Written into every kind of file dlrun reads as YAML (each catalog kind, `config.yaml`, the image
lock, `--references`), it is refused in one line naming the file, in under a second and 100 MB of peak
RSS, measured in a fresh process (its own VmHWM, and resource.getrusage's ru_maxrss of it), which holds an address-space limit so
that a loader that expands the bomb fails with MemoryError instead of taking the machine's memory. Before
the loader bounded aliases, the system file took minutes and gigabytes (`scheduler_options` accepts any
extra field); plain aliases and merge keys still load."""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlrun.catalog.loader import CatalogError, load_file
from dlrun.catalog.models import SystemSpec
from dlrun.yamlfile import MAX_ALIASES, MAX_BYTES, MAX_EXPANDED_CHARS, MAX_EXPANDED_VALUES, YamlError, parse_yaml

REPO = Path(__file__).resolve().parents[1]
#: The process's own peak RSS and the loader's time, with the address space held to 3 GiB.
CHILD = r"""
import json, resource, sys, time
from pathlib import Path
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
kind, path = sys.argv[1], Path(sys.argv[2])
from dlrun.errors import DlrunError
from dlrun.catalog import load_catalog
from dlrun.config import site_config
from dlrun.images.lock import read_lock
from dlrun.cli.compare import _references
start = time.perf_counter()
try:
    if kind == "experiments":
        load_catalog().experiments
    elif kind == "config":
        site_config()
    elif kind == "lock":
        read_lock(path)
    elif kind == "references":
        _references(None, None, None, None, path)
    else:
        load_catalog()
    outcome, code = "loaded", 0
except DlrunError as exc:
    outcome, code = str(exc), exc.exit_code
except MemoryError:
    outcome, code = "MemoryError", -1
# the peak of this process's own memory (VmHWM; ru_maxrss would also hold its parent's before exec)
peak_kib = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"outcome": outcome, "code": code, "seconds": time.perf_counter() - start,
                  "peak_mib": peak_kib / 1024}))
"""
#: Runs CHILD as its only child and prints that child's peak RSS as the kernel counts it for its parent
#: (resource.getrusage(RUSAGE_CHILDREN).ru_maxrss). Started from this small process, not from pytest: a child
#: spawned by vfork counts its parent's peak before exec as its own, and pytest's is large.
MEASURE = r"""
import json, os, resource, sys
pid = os.posix_spawn(sys.executable, [sys.executable, *sys.argv[1:]], os.environ)
_, status = os.waitpid(pid, 0)
peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"status": os.waitstatus_to_exitcode(status), "maxrss_mib": peak_kib / 1024}), file=sys.stderr)
"""


def bomb(levels: int, indent: str = "") -> str:
    """`levels` levels of nine aliases to the level below: 9**levels strings of three letters."""
    lines = [f'{indent}a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"{indent}a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


#: kind -> (file under the site folder, its text around a 9-level bomb)
FILES = {
    "systems": ("systems/bomb.yaml", "name: bomb\ndescription: d\nscheduler: slurm\nscheduler_options:\n{bomb}"),
    "workloads": ("workloads/bomb.yaml", "- name: bomb\n  description: d\n  model: resnet50\n  x:\n{bomb}"),
    "images": ("images/bomb.yaml", "name: bomb\ndescription: d\nx:\n{bomb}"),
    "containers": ("containers/bomb/image.yaml", "name: bomb\ndescription: d\nx:\n{bomb}"),
    "experiments": ("experiments/bomb.yaml", "id: bomb\ntitle: t\nx:\n{bomb}"),
    "config": ("xdg/dlrun/config.yaml", "site: a\nx:\n{bomb}"),
    "lock": ("images.lock", "version: 1\nimages:\n  x:\n{bomb}"),
    "references": ("references.yaml", "- value: 1\n  x:\n{bomb}"),
}


@pytest.mark.parametrize("kind", sorted(FILES))
def test_a_nine_level_alias_bomb_is_refused_fast_and_small(tmp_path, kind):
    relative, template = FILES[kind]
    path = tmp_path / "site" / relative
    path.parent.mkdir(parents=True)
    path.write_text(template.format(bomb=bomb(9, "    ")))
    assert path.stat().st_size < 1200  # a kilobyte
    env = {**os.environ, "DLRUN_PATH": str(tmp_path / "site"), "XDG_CONFIG_HOME": str(tmp_path / "site" / "xdg"),
           "DLRUN_HOME": str(tmp_path / "home")}
    proc = subprocess.run([sys.executable, "-c", MEASURE, "-c", CHILD, kind, str(path)], capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(proc.stdout)
    measured = json.loads(proc.stderr.strip().splitlines()[-1])
    assert measured["status"] == 0, proc.stderr[-2000:]
    assert seen["code"] == 2, seen
    assert str(path) in seen["outcome"] and "alias" in seen["outcome"] and "\n" not in seen["outcome"], seen
    print(f"\n{kind}: refused in {seen['seconds']:.3f} s, peak RSS {measured['maxrss_mib']:.1f} MiB (getrusage)")
    assert seen["seconds"] < 1.0 and seen["peak_mib"] < 100 and measured["maxrss_mib"] < 100, (seen, measured)


def test_the_cli_refuses_a_bomb_in_a_site_catalog_in_one_line(tmp_path):
    site = tmp_path / "site" / "systems"
    site.mkdir(parents=True)
    (site / "bomb.yaml").write_text(FILES["systems"][1].format(bomb=bomb(9, "  ")))
    env = {**os.environ, "DLRUN_PATH": str(tmp_path / "site"), "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
           "DLRUN_HOME": str(tmp_path / "home")}
    fence = lambda: resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))  # noqa: E731 (as CHILD holds)
    proc = subprocess.run([sys.executable, "-m", "dlrun.cli", "plan", "trivial"], capture_output=True, text=True,
                          env=env, timeout=300, preexec_fn=fence)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.count("\n") == 1 and f"{site / 'bomb.yaml'}:" in proc.stderr, proc.stderr


def test_aliases_and_merge_keys_within_the_bounds_still_load(tmp_path):
    path = tmp_path / "systems.yaml"
    path.write_text("- &base\n  name: a\n  description: d\n  nodes: 2\n  memory_gb: 8\n  cpu: {cores_per_socket: 4}\n"
                    "  scheduler: slurm\n"
                    "  scheduler_options: {partition: p}\n"
                    "- <<: *base\n  name: b\n  nodes: 4\n")
    a, b = load_file(SystemSpec, path)
    assert (a.name, a.nodes, b.name, b.nodes, b.scheduler_options.partition) == ("a", 2, "b", 4, "p")


def test_recursive_aliases_too_many_aliases_and_big_files_are_one_line(tmp_path):
    with pytest.raises(YamlError, match=r"^x:1: an alias refers to a value that holds it"):
        parse_yaml("&a [*a]\n", "x")
    many = "a: &a 1\nb: [" + ", ".join(["*a"] * (MAX_ALIASES + 1)) + "]\n"
    with pytest.raises(YamlError, match=r"^x:1: more than 1,000 aliases"):
        parse_yaml(many, "x")
    wide = "a: &a " + "x" * 100_000 + "\nb: [" + ", ".join(["*a"] * 200) + "]\n"  # 20 MB of characters
    with pytest.raises(YamlError, match=r"more than .* characters"):
        parse_yaml(wide, "x")
    big = tmp_path / "systems" / "big.yaml"
    big.parent.mkdir()
    big.write_text("# " + "x" * MAX_BYTES + "\n")
    with pytest.raises(CatalogError, match=rf"big\.yaml:1: .* more than the {MAX_BYTES:,}"):
        load_file(SystemSpec, big)
    latin = tmp_path / "systems" / "latin.yaml"
    latin.write_bytes(b"name: a\ndescription: caf\xe9\n")
    with pytest.raises(CatalogError, match=r"latin\.yaml:2: not UTF-8"):
        load_file(SystemSpec, latin)


def _totals(depth: int, fanout: int, leaf: str, merge: bool) -> tuple[int, int, int]:
    """(aliases, values, characters) of the fuzzed document with every alias expanded, counted by hand."""
    leaf_chars = len(leaf.strip("'"))
    values, chars = [2], [leaf_chars]  # l0: the list and its leaf
    for _ in range(depth):
        values.append(1 + fanout * values[-1])
        chars.append(fanout * chars[-1])
    total_values = 1 + sum(1 + v for v in values)  # the root mapping, each key and its list
    total_chars = sum(len(f"l{k}") + c for k, c in enumerate(chars))
    aliases = depth * fanout
    if merge:  # m: {k: *l}, n: {<<: *m, j: 1}
        m_values, m_chars = 2 + values[-1], 1 + chars[-1]
        total_values += 1 + m_values + 1 + 1 + 1 + m_values + 2
        total_chars += 1 + m_chars + 1 + 2 + m_chars + 2
        aliases += 2
    return aliases, total_values, total_chars


@settings(max_examples=150, derandomize=True, deadline=None, database=None, print_blob=False,
          suppress_health_check=[HealthCheck.too_slow])
@given(depth=st.integers(1, 12), fanout=st.integers(1, 12), leaf=st.sampled_from(["1", "x", "'" + "y" * 50 + "'"]),
       merge=st.booleans())
def test_fuzz_alias_graphs_load_whole_or_are_refused(depth, fanout, leaf, merge):
    """Alias graphs of every depth and width: refused in one line exactly when a bound is passed (counted
    here by hand), otherwise the data comes back as the aliases say."""
    lines = [f"l0: &l0 [{leaf}]"]
    for level in range(1, depth + 1):
        lines.append(f"l{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * fanout) + "]")
    if merge:
        lines.append(f"m: &m {{k: *l{depth}}}\nn: {{<<: *m, j: 1}}")
    aliases, values, chars = _totals(depth, fanout, leaf, merge)
    over = aliases > MAX_ALIASES or values > MAX_EXPANDED_VALUES or chars > MAX_EXPANDED_CHARS
    try:
        data, _ = parse_yaml("\n".join(lines) + "\n", "fuzz")
    except YamlError as exc:
        assert str(exc).startswith("fuzz:") and "\n" not in str(exc)
        assert over, (aliases, values, chars, str(exc))
        return
    assert not over, (aliases, values, chars)
    value = data["n"]["k"] if merge else data[f"l{depth}"]
    for _ in range(depth):
        assert len(value) == fanout
        value = value[-1]
    assert value == [yaml.safe_load(leaf)]
