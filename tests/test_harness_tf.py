"""The TensorFlow 2 harness for real: every model trains a step on the CPU, real data through tf.data (JPEG
folders and TFRecord shards), a real `dlrun run` on image host-tf with the PyTorch harness's result contract,
and real 2-rank Horovod runs under mpirun whose replica check passes with DistributedGradientTape and fails
the run with Horovod's Keras DistributedOptimizer (which does not average gradients under Keras 3)."""
from __future__ import annotations

import ast
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from conftest import cli_json, run_cli
from dlrun.catalog.models import TF2_HARNESS_MODELS
from dlrun.paths import HARNESS_DIR, harness_files
from dlrun.harness import load_harness

pytestmark = pytest.mark.tensorflow  # every test here imports or runs TensorFlow

ENTRY = HARNESS_DIR / "harness_tensorflow.py"
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", "--bind-to", "none"]

# (model, image size) small enough for a 2-core CPU; InceptionV3 needs >= 75 px. Every keras.applications model
# and every builder written in the harness trains; resnet34 and resnet101/152_v1.5 are the builders of resnet18 and
# resnet50_v1.5 with more blocks per stage (3,4,6,3; 3,4,23,3; 3,8,36,3), left out to keep the file fast.
SMALL = {"trivial": 16, "lenet": 28, "alexnet": 63, "resnet18": 32, "resnet50": 32, "resnet101": 32,
         "resnet152": 32, "resnet50_v1.5": 32, "vgg16": 32, "inception3": 75}
SAME_BUILDER = {"resnet34", "resnet101_v1.5", "resnet152_v1.5"}
# torchvision's parameter counts (ENVIRONMENT facts; Ren et al. Table II prints the same to 4 digits): the
# definitions written here reproduce them exactly; ResNets and AlexNet (adaptive pooling) at any input size.
TORCHVISION_PARAMS = {"resnet18": 11_689_512, "resnet50_v1.5": 25_557_032, "alexnet": 61_100_840}


def _result(text: str) -> dict:
    (line,) = [ln for ln in text.splitlines() if ln.startswith("DLRUN_RESULT ")]
    return json.loads(line[len("DLRUN_RESULT "):])


def test_model_names_agree_and_files_ship():
    entry = load_harness("tensorflow")
    models = load_harness("tensorflow", "models")
    assert entry.MODEL_NAMES == models.MODEL_NAMES == sorted(TF2_HARNESS_MODELS) == sorted({*SMALL, *SAME_BUILDER})
    names = [p.name for p in harness_files("tensorflow")]
    assert names[0] == "harness_tensorflow.py" and names[1:] == sorted(names[1:])
    assert {"harness_common.py", "harness_contract.py", "harness_node.py", "harness_ranks.py",
            "harness_result_schema.py", "harness_tensorflow_data.py",
            "harness_tensorflow_models.py", "harness_tensorflow_process.py", "harness_tensorflow_ps.py",
            "harness_tensorflow_train.py"} == set(names[1:])
    for name in names[1:]:
        assert "``%s``" % name in entry.__doc__, name


def test_syntax_floor_python36_and_imports():
    files = harness_files("tensorflow")
    proc = subprocess.run([sys.executable, "-c", "import sys, vermin; sys.exit(vermin.main())", "-t=3.6-",
                           "--no-tips", "--violations", *map(str, files)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    siblings = {p.stem for p in files}
    for path in files:
        roots = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                roots.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                roots.add(node.module.split(".")[0])
        assert not roots - set(sys.stdlib_module_names) - {"tensorflow", "keras", "numpy", "horovod"} - siblings


def test_every_model_trains_a_step_on_cpu():
    models = load_harness("tensorflow", "models")
    train = load_harness("tensorflow", "train")
    process = load_harness("tensorflow", "process")
    import keras
    keras.mixed_precision.set_global_policy("float32")
    tf.config.run_functions_eagerly(True)  # the same step, without tracing 13 graphs
    try:
        for name, size in SMALL.items():
            keras.utils.set_random_seed(1)
            model = models.build_model(name, size)
            if name in TORCHVISION_PARAMS:
                assert models.count_params(model) == TORCHVISION_PARAMS[name], name
            opt = keras.optimizers.SGD(learning_rate=0.01, momentum=0.9)
            step = train.make_step(model, opt, process.Comm(None), "tape")
            images = tf.random.uniform((1, size, size, 3))
            labels = tf.constant([999])
            before = model.trainable_variables[-1].numpy().copy()
            loss = float(step(images, labels))
            assert np.isfinite(loss) and loss > 0, name
            assert not np.array_equal(before, model.trainable_variables[-1].numpy()), name  # it learned
            assert model.output_shape == (None, 1000), name
    finally:
        tf.config.run_functions_eagerly(False)


def _jpeg(rng, h, w) -> bytes:
    from PIL import Image
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(buf, format="JPEG")
    return buf.getvalue()


def _run_in_process(capsys, *argv: str) -> tuple[int, dict | None, str]:
    rc = load_harness("tensorflow").main(list(argv))
    out, err = capsys.readouterr()
    return rc, (_result(out) if rc == 0 else None), err


def test_real_data_jpeg_folder_and_tfrecord_shards(tmp_path, capsys):
    rng = np.random.default_rng(0)
    folder = tmp_path / "folder" / "train"
    for cls in ("n01", "n02"):
        (folder / cls).mkdir(parents=True)
        for i in range(3):
            (folder / cls / f"{i}.JPEG").write_bytes(_jpeg(rng, 20 + i, 30))
    shards = tmp_path / "records"
    shards.mkdir()
    for shard in range(2):
        with tf.io.TFRecordWriter(str(shards / f"train-{shard:05d}-of-00002")) as writer:
            for i in range(3):
                feature = {"image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(
                               value=[_jpeg(rng, 24, 18 + i)])),
                           "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[1 + i]))}
                writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    common = ("--model", "trivial", "--batch-size", "2", "--steps", "2", "--warmup-steps", "1",
              "--image-size", "16", "--data-workers", "1")
    rc, folder_result, err = _run_in_process(capsys, *common, "--data-dir", str(folder.parent))
    assert rc == 0, err
    assert folder_result["data"] == "image folder, 6 JPEG(s) in 2 class(es)"
    rc, records_result, err = _run_in_process(capsys, *common, "--data-dir", str(shards), "--precision", "amp")
    assert rc == 0, err
    assert records_result["data"] == "2 TFRecord shard(s)" and records_result["amp_dtype"] == "bfloat16"
    for result in (folder_result, records_result):
        assert np.isfinite(result["final_loss"]) and result["image_size"] == [16, 16]
    # A directory with neither: one line naming it, exit 2.
    (tmp_path / "empty" / "n01").mkdir(parents=True)
    rc, _, err = _run_in_process(capsys, *common, "--data-dir", str(tmp_path / "empty"))
    assert rc == 2 and err.count("\n") == 1 and "holds no JPEG files" in err


def test_without_tensorflow_one_line_exit_2():
    # -S: no site-packages, so this interpreter has no TensorFlow.
    proc = subprocess.run([sys.executable, "-S", str(ENTRY), "--model", "trivial"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("dlrun-harness: error: TensorFlow 2 is not importable")
    assert proc.stderr.count("\n") == 1


@pytest.mark.horovod
@pytest.mark.mpi
def test_dlrun_run_host_tf_stores_the_pytorch_contract(dlrun_home):
    """A real 2-rank TF 2 run (mpirun, Horovod's DistributedGradientTape, replicas checked) and a real 2-rank
    PyTorch DDP run through `dlrun run`: the same stored JSON contract."""
    base = ("--steps", "2", "--warmup-steps", "1", "--batch-size", "2")
    tf_proc = run_cli("run", "trivial", "--image", "host-tf", "--ranks-per-node", "2", *base)
    assert tf_proc.returncode == 0, tf_proc.stdout + tf_proc.stderr
    torch_proc = run_cli("run", "trivial", "--ranks-per-node", "2", *base)
    assert torch_proc.returncode == 0, torch_proc.stdout + torch_proc.stderr
    shown = {}
    for run in cli_json("results", "list"):
        detail = cli_json("results", "show", run["id"])
        shown[detail["results"][0]["extra"]["framework"]] = detail
    tf_extra, torch_extra = (shown[f]["results"][0]["extra"] for f in ("tensorflow", "pytorch"))
    # What only the PyTorch harness records yet: its DDP ranks' step timing (a communication hook) and its time
    # to the first step (with the launcher's start-up beside it); every other field is common.
    torch_only = {"per_rank_step_p50_s", "per_rank_step_p95_s", "per_rank_ready_p50_s", "per_rank_ready_p95_s",
                  "per_rank_wait_p50_s", "per_rank_wait_p95_s", "per_rank_host", "per_rank_device", "rank_spread",
                  "rank_timing_is", "slowest_rank", "first_step_unix", "time_to_first_step_s", "start_up"}
    assert set(torch_extra) - set(tf_extra) <= torch_only, set(torch_extra) - set(tf_extra) - torch_only
    assert "slowest_rank" in torch_extra and "per_rank_step_p50_s" in torch_extra
    assert set(tf_extra) - set(torch_extra) == {"data", "gradient_averaging", "keras_version", "model_source"}
    assert tf_extra["dist"] == "horovod" and torch_extra["dist"] == "ddp" and torch_extra["horovod_version"] is None
    assert tf_extra["data_source"] == torch_extra["data_source"] == "synthetic"
    assert tf_extra["unit"] == torch_extra["unit"] == "images/sec" and tf_extra["model"] == "trivial"
    assert tf_extra["value"] == pytest.approx(2 * 2 * 2 / tf_extra["wall_time_s"], rel=1e-3)
    assert torch_extra["backend"] == "gloo" and tf_extra["backend"] == "horovod"
    assert tf_extra["world_size"] == 2 and tf_extra["gradient_averaging"] == "tape"
    assert tf_extra["horovod_version"] == "0.28.1" and tf_extra["rank_source"] == "openmpi"
    # both harnesses record the quality inputs (harness_common) and the node; both runs are judged and keyed
    for extra, detail in ((tf_extra, shown["tensorflow"]), (torch_extra, shown["pytorch"])):
        [host] = extra["quality"]["hosts"].values()
        assert host["ranks"] == [0, 1] and extra["quality"]["steps"] == 2 and 0 <= host["others_share"] <= 1
        assert extra["node"]["cpu_model"] and extra["node"]["gpus"] == []
        assert detail["fingerprint"]["node_from"] == "job" and detail["quality"]["verdict"] != "ok"  # 2 steps
    assert shown["tensorflow"]["fingerprint"] == shown["pytorch"]["fingerprint"]
    # The host-tf run hashed the TensorFlow harness files it ran.
    assert sorted(shown["tensorflow"]["provenance"]["harness_files_sha256"]) == sorted(
        p.name for p in harness_files("tensorflow"))
    # `--data DIR` reaches the TF 2 harness as its real-data directory (on the host: DIR itself).
    dry = run_cli("run", "trivial", "--image", "host-tf", "--data", str(dlrun_home.parent), "--dry-run")
    assert dry.returncode == 0 and f"--data-dir {dlrun_home.parent}" in dry.stdout, dry.stdout + dry.stderr
    # Workloads the TF 2 harness has no model for are refused in one line.
    bad = run_cli("plan", "bert_swag", "--image", "host-tf")
    assert bad.returncode == 2 and "no model in dlrun's TensorFlow 2 harness" in bad.stderr


def _mpirun_harness(*extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "TF_CPP_MIN_LOG_LEVEL": "2", "OMP_NUM_THREADS": "1"}
    return subprocess.run([*MPIRUN, sys.executable, str(ENTRY), "--model", "trivial", "--batch-size", "4",
                           "--steps", "3", "--warmup-steps", "1", "--threads", "1", "--expected-world-size", "2",
                           *extra], capture_output=True, text=True, timeout=300, env=env)


@pytest.mark.horovod
@pytest.mark.mpi
def test_keras_distributed_optimizer_does_not_average_and_the_check_fails_the_run():
    proc = _mpirun_harness("--gradient-averaging", "keras-optimizer")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "DLRUN_RESULT" not in proc.stdout
    assert "dlrun-harness: error: replicas diverged" in proc.stderr


def test_parameter_servers_one_ps_two_workers_on_localhost():
    """TF 2 ParameterServerStrategy: the harness starts 1 parameter server and 2 workers (gRPC, localhost)."""
    proc = subprocess.run([sys.executable, str(ENTRY), "--model", "trivial", "--batch-size", "4", "--steps", "6",
                           "--warmup-steps", "2", "--parameter-servers", "1", "--ps-workers", "2"],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    result = _result(proc.stdout)
    assert result["variable_update"] == "parameter_server" and result["parameter_servers"] == 1
    assert result["world_size"] == 2 and len(result["cluster"]["worker"]) == 2 and len(result["cluster"]["ps"]) == 1
    assert result["variable_devices"] and all(d.startswith("/job:ps/") for d in result["variable_devices"])
    assert np.isfinite(result["final_loss"]) and result["value"] > 0
