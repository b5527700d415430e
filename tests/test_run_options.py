"""The run options are declared once (dlrun.runoptions); the CLI, the Plan, experiment points and the
comparability key are derived from that table. These tests fail when one of them drifts from it."""
from __future__ import annotations

import dataclasses

import pytest
import typer.main

from conftest import REPO

from dlrun.catalog.experiment_points import Point
from dlrun.cli.app import app
from dlrun.plan import DERIVED_FIELDS, Plan, resolve_plan
from dlrun.results.key import KEY_FIELDS, NOT_FROM_OPTIONS
from dlrun.runoptions import BY_NAME, RESOLVERS, RUN_OPTIONS, key_fields, request
from dlrun.render import render_job

#: A valid value other than the default for every option, on the `matrix` test system (2 nodes x 2 GPUs,
#: ib/roce/tcp, Slurm). A new option needs one here: the test below checks that it reaches the plan.
SAMPLES = {
    "image": "pytorch2.6-ngc24.12", "system": "dgx2", "nodes": 3, "ranks_per_node": 1, "threads": 3, "batch_size": 5,
    "global_batch_size": 12, "steps": 7, "warmup_steps": 2, "precision": "amp", "data": "{dataset}",
    "stage_data": True, "data_workers": 3, "bind": ["/scratch/out:/out:rw"], "env": ["FOO=bar"],
    "secret_env": ["HF_TOKEN"], "scheduler": "pbs", "launcher": "mpirun", "runtime": "enroot",
    "dist": "horovod", "launcher_arg": ["--exclusive"], "fabric": "roce", "partition": "debug", "account": "proj",
    "time": "01:00:00", "exclusive": False, "nodelist": "c1,c2", "allocator": "jemalloc", "variable_update": "replicated",
    "all_reduce_spec": "xring", "ps": 1, "data_format": "NHWC", "benchmark_arg": ["--optimizer=momentum"],
    "telemetry": "off", "fused_optimizer": "off", "fused_bn_relu": "off", "channels_last": "off", "compile": "on", "pin_threads": "on",
    "cudnn_benchmark": "off", "tune": "auto",  # tests run with DLRUN_TUNE=off (conftest)
    "seq_length": 128, "grad_accum": 2, "activation_checkpointing": True, "checkpoint_every": 5,
    "checkpoint_dir": "/scratch/ckpt", "dataparallel_gpus": 1, "arch": "ppc64le",
}
#: Options of LLM workloads only, shown on llama3_tiny.
LLM_OPTIONS = {"seq_length", "activation_checkpointing"}
#: Options that cannot be shown on the `matrix` system's PyTorch image (they need a TensorFlow image), with
#: the system and image where they apply.
TF_OPTIONS = {"variable_update", "all_reduce_spec", "ps", "data_format", "benchmark_arg"}
#: Options whose sample needs another option's value to be valid.
NEEDS = {"stage_data": {"data": "{dataset}"}, "secret_env": {"env": ["HF_TOKEN=s3cret"]}, "scheduler": {"launcher": "mpirun"},
         "system": {"image": None, "fabric": None, "nodes": 1, "scheduler": None, "launcher": None, "runtime": None}, "all_reduce_spec": {"variable_update": "replicated"},
         "checkpoint_dir": {"checkpoint_every": 5}, "dataparallel_gpus": {"dist": "dataparallel", "ranks_per_node": 1}}


def _command_params(name: str) -> dict[str, object]:
    command = typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]
    return {param.name: param for param in command.params}


@pytest.mark.parametrize("command", ["run", "plan"])
def test_the_cli_options_of_run_and_plan_are_the_declared_ones(command):
    params = _command_params(command)
    for opt in RUN_OPTIONS:
        param = params[opt.name]
        flags = [*param.opts, *param.secondary_opts]
        assert set(opt.flags[0].split("/") if "/" in opt.flags[0] else opt.flags) == set(flags), opt.name
        assert param.help is not None and param.help.startswith(opt.help)
        # --help says what a missing value becomes: the literal default, or where it comes from
        assert param.show_default or opt.default_from or opt.default is not None or opt.type in (bool, list) \
            or opt.name in ("data", "global_batch_size", "all_reduce_spec"), opt.name
    own = set(params) - set(BY_NAME) - {"workload"}
    assert own <= {"skip_checks", "dry_run", "verbose"}, own


def test_every_plan_field_is_set_by_one_option_or_derived():
    declared = {opt.field for opt in RUN_OPTIONS if opt.field}
    assert declared <= set(Plan.model_fields), declared - set(Plan.model_fields)
    assert set(Plan.model_fields) == declared | set(DERIVED_FIELDS)
    assert not declared & set(DERIVED_FIELDS)


def test_every_option_names_a_resolver_of_the_pipeline():
    from dlrun.plan.resolve import PIPELINE

    assert set(RESOLVERS[1:]) == set(PIPELINE)
    assert {opt.resolver for opt in RUN_OPTIONS} <= set(RESOLVERS)


def test_experiment_axes_are_point_fields_and_plan_options_follow_the_declarations():
    fields = {f.name for f in dataclasses.fields(Point)} | {name for name, value in vars(Point).items()
                                                            if isinstance(value, property)}
    axes = {opt.name: opt.axis for opt in RUN_OPTIONS if opt.axis}
    assert set(axes.values()) <= fields, set(axes.values()) - fields
    point = Point(experiment="e", index=0, system="matrix", values={}, workload="trivial", nodes=2,
                  batch_per_device=4, parameter_servers=2, allreduce_strategy="replicated:xring")
    options = point.plan_options()
    assert set(options) == set(axes)
    assert (options["batch_size"], options["ps"], options["variable_update"], options["all_reduce_spec"]) == (
        4, 2, "replicated", "xring")
    request(options)  # every name is a declared option


def test_key_fields_are_the_declared_ones_plus_those_no_option_decides():
    declared = set(key_fields())
    assert declared <= set(KEY_FIELDS), declared - set(KEY_FIELDS)
    assert set(KEY_FIELDS) == declared | set(NOT_FROM_OPTIONS)
    assert not declared & set(NOT_FROM_OPTIONS), declared & set(NOT_FROM_OPTIONS)


def test_every_option_has_a_sample_and_every_sample_reaches_the_plan(dlrun_home, tmp_path):
    from matrix_catalog import matrix_catalog

    assert set(SAMPLES) == set(BY_NAME), "declare a sample value for every option"
    dataset = tmp_path / "imagenet"
    dataset.mkdir()
    catalog = matrix_catalog()
    base = dict(system="matrix", scheduler="slurm", launcher="srun", runtime="singularity", ranks_per_node=2,
                nodes=2)

    def plan(workload="trivial", **extra):
        options = {**base, **extra}
        options = {k: (str(dataset) if v == "{dataset}" else v) for k, v in options.items()}
        return resolve_plan(catalog, workload, **{k: v for k, v in options.items() if v is not None})

    baseline = plan().summary()
    llm = plan("llama3_tiny").summary()
    for name in sorted(LLM_OPTIONS):
        changed = plan("llama3_tiny", **{name: SAMPLES[name]}).summary()
        assert changed[BY_NAME[name].field] != llm[BY_NAME[name].field], name
    for opt in RUN_OPTIONS:
        if opt.name in TF_OPTIONS or opt.name in LLM_OPTIONS:
            continue  # below, on a TensorFlow image; above, on an LLM
        assert base.get(opt.name) != SAMPLES[opt.name], f"the sample of --{opt.name} is the baseline's value"
        extra = {**NEEDS.get(opt.name, {}), opt.name: SAMPLES[opt.name]}
        changed = plan(**extra).summary()
        assert changed != baseline, f"--{opt.name} did not change the plan"
        if opt.field:
            assert changed[opt.field] != baseline[opt.field], f"--{opt.name} did not change Plan.{opt.field}"


def test_tf_cnn_benchmarks_options_reach_the_plan_and_the_script(dlrun_home):
    from dlrun.cli.options import load_catalog

    catalog = load_catalog()
    base = resolve_plan(catalog, "resnet50", system="txgaia", nodes=1)
    for name in sorted(TF_OPTIONS):
        extra = {**NEEDS.get(name, {}), name: SAMPLES[name]}
        plan = resolve_plan(catalog, "resnet50", system="txgaia", nodes=1, **extra)
        field = BY_NAME[name].field
        assert getattr(plan, field) != getattr(base, field), name
        assert render_job(plan).script != render_job(base).script, name


def test_the_tf2_harness_gets_data_dir_once_exact_argv(dlrun_home, tmp_path):
    from dlrun.cli.options import load_catalog
    from dlrun.render import workload_command

    catalog = load_catalog()
    plan = resolve_plan(catalog, "resnet50", image="host-tf", data=str(tmp_path), steps=2, warmup_steps=1,
                        batch_size=4, threads=2)
    assert workload_command(plan) == [
        plan.image.python, f"{plan.image.harness_dir}/harness_tensorflow.py", "--model", "resnet50_v1.5",
        "--threads", "2", "--batch-size", "4", "--steps", "2", "--warmup-steps", "1", "--precision", "fp32",
        "--data-dir", "/data", "--timeout-s", "1800", "--device", "cpu", "--expected-world-size", "1"]


@pytest.mark.parametrize("argv,message", [
    (["--data", "{A}", "--bind", "{B}:/data"], "--bind {B}:/data: /data is where --data mounts the dataset"),
    (["--bind", "{B}:/data"], "/data is where --data mounts the dataset; valid: --data DIR"),
])
def test_a_bind_onto_data_is_refused_in_one_line(dlrun_home, tmp_path, cli, argv, message):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    argv = [arg.format(A=a, B=b) for arg in argv]
    proc = cli("run", "trivial", *argv, "--dry-run")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"dlrun: error: {message.format(B=b)}"] or \
        message.format(B=b) in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_the_default_system_comes_from_the_environment_then_config_then_the_host_name(dlrun_home, tmp_path, cli):
    config = tmp_path / "xdg-config" / "dlrun"
    config.mkdir(parents=True)
    design_card = ["--image", "tf1.14-nccl", "--nodes", "8", "resnet50", "--dry-run"]
    assert cli(*design_card).returncode == 2  # localhost has one node
    assert cli(*design_card, env={"DLRUN_SYSTEM": "txgaia"}).returncode == 0
    (config / "config.yaml").write_text("system: txgaia\n")
    assert cli(*design_card).returncode == 0
    proc = cli(*design_card, env={"DLRUN_SYSTEM": "txgaiaa"})
    assert proc.returncode == 2 and "unknown system in $DLRUN_SYSTEM 'txgaiaa'; did you mean 'txgaia'?" in proc.stderr
    (config / "config.yaml").write_text("site: here\n")
    systems = config / "systems"
    systems.mkdir()
    import socket

    host = socket.gethostname()
    (systems / "mine.yaml").write_text(
        "name: mine\ndescription: this host, found by name\nhostnames: ['" + host.replace(".", r"\.") + "']\n"
        "nodes: 8\ncpu: {model: x, sockets: 1, cores_per_socket: 2}\nmemory_gb: 8\ndefault_image: tf1.14-nccl\n")
    proc = cli("plan", "resnet50", "--nodes", "8")
    assert proc.returncode == 0, proc.stderr
    assert '"name": "mine"' in proc.stdout


@pytest.mark.parametrize("system,image,precision,message", [
    ("localhost", None, "tf32", "--precision tf32: pytorch on CPUs (image 'host') cannot train in it; valid: fp32, bf16, amp"),
    ("localhost", None, "fp16", "--precision fp16: pytorch on CPUs"),
    ("txgaia", None, "bf16", "--precision bf16: tf_cnn_benchmarks on GPUs (image 'tf1.14-nccl') cannot train in it; "
                             "valid: fp32, fp16, amp"),
    ("localhost", "host-tf", "fp16", "valid: fp32, bf16, amp"),
])
def test_a_precision_the_code_or_device_cannot_run_is_refused(dlrun_home, system, image, precision, message):
    from dlrun.cli.options import load_catalog
    from dlrun.errors import UsageError

    with pytest.raises(UsageError) as exc:
        resolve_plan(load_catalog(), "resnet50", system=system, image=image, precision=precision)
    assert message in str(exc.value)


def test_every_precision_the_device_can_run_reaches_the_harness(dlrun_home):
    from dlrun.cli.options import load_catalog
    from dlrun.render import workload_command

    catalog = load_catalog()
    for system, precisions in (("localhost", ("fp32", "bf16", "amp")), ("dgx2", ("fp32", "tf32", "fp16", "bf16", "amp"))):
        for precision in precisions:
            image = "pytorch2.6-ngc24.12" if system == "dgx2" else None
            argv = workload_command(resolve_plan(catalog, "resnet50", system=system, image=image, precision=precision))
            assert argv[argv.index("--precision") + 1] == precision


@pytest.mark.parametrize("given,period", [(None, 1.0), ("off", None), ("OFF", None), ("0.5", 0.5), ("3600", 3600.0)])
def test_telemetry_takes_off_or_a_period(dlrun_home, given, period):
    from dlrun.cli.options import load_catalog

    plan = resolve_plan(load_catalog(), "trivial", **({"telemetry": given} if given else {}))
    assert plan.telemetry_period == period


@pytest.mark.parametrize("given", ["0", "0.01", "nan", "inf", "-1", "1h", "3601"])
def test_a_telemetry_period_outside_the_samplers_limits_is_one_line(dlrun_home, cli, given):
    proc = cli("run", "trivial", "--telemetry", given, "--dry-run")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"dlrun: error: bad --telemetry {given!r}; valid: off, or seconds from 0.05 to 3600"]


def test_a_new_harness_option_is_its_declaration_alone(monkeypatch):
    """Declaring a harness-only option (a flag, no Plan field) gives the CLI option, its check, the plan's value
    and the rendered flag, with no code anywhere else: the declaration owns every hop."""
    import dlrun.runoptions as runoptions
    from matrix_catalog import matrix_catalog

    from dlrun.cli.options import typer_parameter
    from dlrun.errors import UsageError
    from dlrun.render import harness_command

    new = runoptions._opt("demo_depth", "A harness-only option of this test.", type=int, minimum=1,
                          resolver="harness", harness_flag="--demo-depth")
    monkeypatch.setattr(runoptions, "RUN_OPTIONS", (*runoptions.RUN_OPTIONS, new))
    monkeypatch.setattr(runoptions, "BY_NAME", {**runoptions.BY_NAME, new.name: new})
    assert typer_parameter(new).name == "demo_depth"
    plan = resolve_plan(matrix_catalog(), "trivial", system="matrix", demo_depth=3)
    assert plan.harness_options == {"demo_depth": 3}
    argv = harness_command(plan)
    assert argv[argv.index("--demo-depth") + 1] == "3"
    assert "--demo-depth" not in harness_command(resolve_plan(matrix_catalog(), "trivial", system="matrix"))
    with pytest.raises(UsageError, match="^--demo-depth must be a positive integer, got 0$"):
        resolve_plan(matrix_catalog(), "trivial", system="matrix", demo_depth=0)


def test_every_option_says_how_it_reaches_the_job():
    """A harness flag, a rank variable, the scheduler's options, or a Plan field a backend renders: nothing is
    declared that goes nowhere, and what the harness receives of an option comes from its declaration."""
    assert all(opt.reaches() for opt in RUN_OPTIONS)
    flags = {opt.harness_flag for opt in RUN_OPTIONS if opt.harness_flag}
    assert {"--batch-size", "--steps", "--warmup-steps", "--precision", "--threads", "--data-dir", "--data-workers",
            "--dist", "--timeout-s", "--global-batch-size", "--checkpoint-dir"} <= flags
    source = (REPO / "launcher" / "dlrun" / "render.py").read_text()
    assert not [flag for flag in flags if f'"{flag}"' in source], "render.py writes an option's flag by hand"
