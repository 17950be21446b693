"""fulmen's MLflow logger against a real MLflow tracking server.

Starts `mlflow server` (from the venv of scripts/setup-mlflow-venv.sh) on a
free local port with a SQLite store and served artifacts, runs
tests/interop/mlflow_logger.c against it, and reads everything back with
MLflow's own client (MlflowClient):

- fit: a 2-epoch fit logging to a CSV logger and the MLflow logger at once.
  Every metric of the CSV file (each name, step and value) is in the MLflow
  run's metric history, and nothing else; the module's hyperparameters are
  the run's params; the run is FINISHED, named, tagged as MLflow's client
  tags it plus the logger's own tag; each checkpoint ModelCheckpoint saved
  (on a background thread) is an artifact under its stem (log_model
  "all"), the last one
  byte-identical to the file on disk.
- host: a host loop's logger without a trainer: prefixed and cleaned
  names, NaN and infinity, params cut to Lightning's 250 characters, an
  artifact in a folder with a space, a FAILED status, then a second logger
  resuming the run by id, whose finalize makes it FINISHED.

    .deps/mlflow-venv/bin/python mlflow_logger.py --binary build/interop/mlflow_logger \
        --mlflow-venv .deps/mlflow-venv --work DIR
"""
import argparse
import csv
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(venv, work):
    port = free_port()
    env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false", MLFLOW_DISABLE_TELEMETRY="true")
    log = open(os.path.join(work, "server.log"), "w")
    proc = subprocess.Popen(
        [os.path.join(venv, "bin", "mlflow"), "server", "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1", "--backend-store-uri", f"sqlite:///{work}/db.sqlite",
         "--artifacts-destination", os.path.join(work, "artifacts")],
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    deadline = time.time() + 180
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"mlflow server exited with {proc.returncode}:\n" + open(log.name).read()[-3000:])
        try:
            with urllib.request.urlopen(uri + "/health", timeout=2) as r:
                if r.status == 200:
                    return proc, uri
        except OSError:
            time.sleep(0.5)
    proc.kill()
    sys.exit("mlflow server did not answer /health in 180 s")


def run(binary, uri, out, mode):
    os.makedirs(out, exist_ok=True)
    r = subprocess.run([binary, uri, out, mode], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        sys.exit(f"mlflow_logger {mode} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    lines = dict(line.split(" ", 1) for line in r.stdout.splitlines() if " " in line)
    return lines


def csv_metrics(log_dir):
    """name -> [(step, value)] from a CSV logger's metrics.csv."""
    out = {}
    with open(os.path.join(log_dir, "metrics.csv"), newline="") as f:
        for row in csv.DictReader(f):
            step = int(row.pop("step"))
            for k, v in row.items():
                if v != "":
                    out.setdefault(k, []).append((step, float(v)))
    return out


def history(client, run_id, key):
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def check(cond, what):
    if not cond:
        sys.exit("FAILED: " + what)
    print("ok:", what)


def check_fit(client, lines, work):
    run_id = lines["run"]
    r = client.get_run(run_id)
    check(r.info.status == "FINISHED", f"fit run FINISHED ({r.info.status})")
    check(r.info.run_name == "fit-run", "run name")
    exp = client.get_experiment(r.info.experiment_id)
    check(exp.name == "fulmen-fit", "experiment made by name")
    tags = r.data.tags
    check(tags.get("team") == "fulmen" and tags.get("mlflow.source.type") == "LOCAL"
          and tags.get("mlflow.source.name", "").endswith("mlflow_logger"), f"tags {tags}")
    check(r.data.params == {"lr": "0.1", "hidden": "8"}, f"params {r.data.params}")
    expected = csv_metrics(lines["csv"])
    check({"train_loss_step", "train_loss_epoch", "val_loss", "epoch"} <= set(expected), f"csv names {sorted(expected)}")
    logged = set(r.data.metrics)
    check(logged == set(expected), f"the run's metrics are the CSV's: {sorted(logged)} vs {sorted(expected)}")
    for name, points in expected.items():
        got = history(client, run_id, name)
        check(got == sorted(points), f"{name}: {len(points)} (step, value) pairs equal the CSV's")
    ckpt = lines["ckpt"]
    stem = os.path.splitext(os.path.basename(ckpt))[0]
    folders = sorted(f.path for f in client.list_artifacts(run_id) if f.is_dir)
    check(len(folders) == 2 and stem in folders, f"a folder per saved checkpoint: {folders}")
    d = tempfile.mkdtemp(dir=work)
    local = client.download_artifacts(run_id, f"{stem}/{os.path.basename(ckpt)}", d)
    check(open(local, "rb").read() == open(ckpt, "rb").read(), "the uploaded checkpoint is the file's bytes")
    end = lines["run_end"]
    folders = sorted(f.path for f in client.list_artifacts(end) if f.is_dir)
    check(folders == [stem], f"log_model at the end: the checkpoint on disk then only ({folders})")
    check(history(client, end, "val_loss") == sorted(expected["val_loss"]), "the second MLflow run's metrics")


def check_host(client, lines, work):
    run_id = lines["run"]
    r = client.get_run(run_id)
    check(r.info.status == "FINISHED", f"the resumed run FINISHED ({r.info.status})")
    check(r.info.run_name == "host-run", "host run name")
    check(r.data.params["optimizer"] == "adamw", "params are not prefixed, as Lightning's")
    check(r.data.params["long"] == "v" * 250, "a param cut to Lightning's 250 characters")
    check(history(client, run_id, "p-loss") == [(0, 0.5), (1, 0.25)], "prefixed metric")
    check(history(client, run_id, "loss") == [(2, 0.125)], "the second logger's metric in the run it resumed")
    nan = history(client, run_id, "p-nan")
    check(len(nan) == 1 and math.isnan(nan[0][1]), "NaN round trip")
    inf = history(client, run_id, "p-inf")
    check(len(inf) == 1 and inf[0][1] >= 1.7976931348623157e308, f"infinity stored as MLflow stores it ({inf})")
    check(history(client, run_id, "p-val/acctop-1") == [(2, 0.75)], "':' stripped as Lightning strips it")
    d = tempfile.mkdtemp(dir=work)
    local = client.download_artifacts(run_id, "files/a b/notes.txt", d)
    check(open(local).read() == "fulmen artifact\n", "artifact in a folder with a space")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--binary", required=True)
    p.add_argument("--mlflow-venv", required=True)
    p.add_argument("--work", required=True)
    a = p.parse_args()
    work = os.path.abspath(a.work)
    os.makedirs(work, exist_ok=True)
    from mlflow import MlflowClient  # the MLflow venv's python runs this script

    server, uri = start_server(os.path.abspath(a.mlflow_venv), work)
    try:
        client = MlflowClient(tracking_uri=uri)
        check_fit(client, run(a.binary, uri, os.path.join(work, "fit"), "fit"), work)
        check_host(client, run(a.binary, uri, os.path.join(work, "host"), "host"), work)
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)
    print("mlflow logger: all checks passed")


if __name__ == "__main__":
    main()
