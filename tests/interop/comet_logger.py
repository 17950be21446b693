"""fulmen's Comet logger against comet_ml's own upload code and Lightning's CometLogger.

    python comet_logger.py --binary build/interop/comet_logger --work DIR

The binary (tests/interop/comet_logger.c) writes Comet offline archives;
comet_ml's own upload code (`OfflineSender`, what `comet upload` runs)
reads each one with its schema checks raising, against a recording stand-in
for Comet's server, and:

- fit: the same 2-epoch fit of the same MLP on the same points runs in
  Lightning 2.6 with CometLogger(online=False) and a CSVLogger, as the
  binary runs it with its Comet and CSV loggers. (Lightning 2.6.6 turns
  `online=False` into comet_ml's `disabled=True`, which writes nothing;
  here that one setting is dropped so Lightning's logger writes the
  archive it means to.) Both archives send the same project, name, tags,
  hyperparameters, and the same metrics at the same steps and epochs in
  the same order; every metric value fulmen sends is its CSV file's value
  (the CSV files' parity with Lightning is logger_parity.py's);
  ModelCheckpoint wrote under offline_directory/project/<key>/checkpoints
  on both sides.
- host: a host loop's logger: a given key in mode "get", workspace, tags
  (a repeated one kept once), prefixed names, NaN and -Infinity, typed
  parameters, a name and a value cut as comet_ml cuts them, a parameter
  logged again unchanged not written twice; a second logger in mode
  "create" with no project, ended explicitly.
- died: a process that exits without ending its experiment leaves the
  working folder, which comet_ml's upload code reads as it is.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import zipfile

os.environ["COMET_DISABLE_AUTO_LOGGING"] = "1"

from blob_lightning import blob_fit, csv_rows, run_binary

CHECKS = []


def check(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)
    CHECKS.append(what)


def comet_env(work):
    """comet_ml's config and caches inside the work folder, nothing online."""
    home = os.path.join(work, "comet-home")
    os.makedirs(home, exist_ok=True)
    os.environ.update(COMET_CONFIG=os.path.join(home, ".comet.config"), COMET_INI=os.path.join(home, ".comet.ini"),
                      XDG_CONFIG_HOME=home, XDG_CACHE_HOME=home, COMET_OFFLINE_DIRECTORY=home)


class Recorder:
    """Stands in for comet_ml's connection and REST client: records every call."""

    def __init__(self, name, calls, replies=None):
        self._name, self._calls, self._replies = name, calls, replies or {}
        self.base_url = self.server_address = "http://offline.invalid/"

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)

        def call(*args, **kwargs):
            self._calls.append((self._name + "." + attr, args, kwargs))
            reply = self._replies.get(attr)
            return reply() if callable(reply) else reply
        return call


class Handshake:
    run_id, project_id, is_github, focus_link = "run", "project", False, None
    feature_toggles, s3_direct_access_enabled = {}, False


class Sent:
    """What comet_ml's upload of one offline experiment sent."""

    def __init__(self, meta, calls, lines):
        self.meta, self.calls, self.lines = meta, calls, lines
        self.names = [c[0] for c in calls]
        self.others = {k["key"]: k["value"] for n, _, k in calls if n == "rest.log_experiment_other"}
        self.metrics, self.params = [], {}
        for n, _, k in calls:
            for item in k.get("items", []):
                m = item.message
                if n == "connection.log_metrics_batch":
                    self.metrics.append(m.metric)
                elif n == "connection.log_parameters_batch":
                    self.params[m.param["paramName"]] = m.param
        self.metrics.sort(key=lambda m: m.get("offset", 0))


def upload(path):
    """comet_ml's OfflineSender on an archive (or an unpacked folder), schema
    errors raising, its server calls recorded."""
    from comet_ml.offline import OfflineSender, unzip_offline_archive

    calls = []
    conn = Recorder("connection", calls, {"add_run": Handshake, "get_run": Handshake})
    rest = Recorder("rest", calls)
    if os.path.isdir(path):
        folder = path
    else:
        check(zipfile.ZipFile(path).testzip() is None, f"{os.path.basename(path)}: every record's CRC holds")
        folder = unzip_offline_archive(path)
    try:
        sender = OfflineSender(api_key="0" * 20, offline_dir=folder, raise_validation_error_for_tests=True,
                               connection=conn, rest_api_client=rest, file_upload_waiting_timeout=1,
                               display_level="warning")
        sender.send()
        sender.close()
        with open(os.path.join(folder, "messages.json"), encoding="utf-8") as f:
            lines = [json.loads(line) for line in f]
    finally:
        if folder != path:
            shutil.rmtree(folder)
    names = [c[0] for c in calls]
    check("rest.update_experiment_error_status" not in names, f"{os.path.basename(path)}: no upload error reported")
    check("connection.report" not in names, f"{os.path.basename(path)}: no invalid message reported")
    return Sent(sender.metadata, calls, lines)


def sequence(sent, names):
    """(type, name, step, epoch) of the messages.json lines about `names`, in order."""
    out = []
    for line in sent.lines:
        p = line["payload"]
        if line["type"] == "metric_msg" and p["metric"]["metricName"] in names:
            m = p["metric"]
            out.append(("metric", m["metricName"], m["step"], m["epoch"]))
        elif line["type"] == "parameter_msg" and p["param"]["paramName"] in names:
            m = p["param"]
            out.append(("param", m["paramName"], m["step"], m["paramValue"] if m["source"] != "manual" else None))
    return out


def lightning_fit(work):
    """The binary's fit in Lightning, with CometLogger offline and a CSVLogger."""
    import comet_ml
    from lightning.pytorch.loggers import CometLogger, CSVLogger

    config = comet_ml.ExperimentConfig

    def enabled_config(**kwargs):
        kwargs.pop("disabled", None)
        return config(**kwargs)
    comet_ml.ExperimentConfig = enabled_config

    save = os.path.join(work, "lightning")
    quiet = dict(log_code=False, log_graph=False, parse_args=False, display_summary_level=0, log_git_metadata=False,
                 log_git_patch=False, log_env_details=False, log_env_gpu=False, log_env_host=False,
                 log_env_cpu=False, log_env_network=False, log_env_disk=False, auto_output_logging=False,
                 auto_param_logging=False, auto_metric_logging=False)
    comet = CometLogger(online=False, offline_directory=save, project="fulmen-fit", name="fit-run", tags=["mlp"],
                        **quiet)
    trainer = blob_fit(save, [comet, CSVLogger(save, flush_logs_every_n_steps=1)])
    ckpt = trainer.checkpoint_callback.best_model_path
    key = comet.version
    comet.experiment.end()
    comet_ml.ExperimentConfig = config
    archives = [f for f in os.listdir(save) if f.endswith(".zip")]
    check(len(archives) == 1 and archives[0].startswith(key), f"Lightning's logger wrote its archive ({archives})")
    return os.path.join(save, archives[0]), os.path.relpath(ckpt, save), key


def check_fit(binary, work):
    out = os.path.join(work, "fulmen")
    lines = run_binary(binary, out, "fit")
    f_archive, f_csv, f_ckpt = lines["archive"][0], lines["csv"][0], lines["ckpt"][0]
    l_archive, l_ckpt, l_key = lightning_fit(work)
    f, lt = upload(f_archive), upload(l_archive)
    key = f.meta["offline_id"]
    check(len(key) == 32 and all(c in "0123456789abcdef" for c in key), "a key of 32 hex digits, as comet_ml's")
    check(os.path.basename(f_archive).startswith(key + "-") and len(os.path.basename(f_archive)) == 32 + 11,
          "the archive is <key>-<6 letters>.zip, as comet_ml names it")
    for field in ["project_name", "workspace", "tags", "resume_strategy", "user_provided_experiment_key",
                  "comet_start_sourced"]:
        check(f.meta[field] == lt.meta[field], f"experiment.json's {field} as Lightning's ({f.meta[field]})")
    check(f.meta["start_time"] <= f.meta["stop_time"], "start and stop times")
    check(("connection.add_tags", (["mlp"],), {}) in f.calls, "the tags are sent")
    check(f.others == dict(lt.others, **{"Created from": "fulmen"}) and f.others["Name"] == "fit-run",
          f"the others as Lightning's, created from fulmen ({f.others})")
    manual = lambda s: {k: v["paramValue"] for k, v in s.params.items() if v["source"] == "manual"}
    check(manual(f) == manual(lt) == {"lr": 0.1, "hidden": 8}, f"the hyperparameters ({manual(f)})")
    for p in ["curr_step", "curr_epoch"]:
        check(f.params[p] == lt.params[p], f"the last {p} as Lightning's ({f.params[p]})")
    names = {"train_loss_step", "train_loss_epoch", "val_loss", "curr_step", "curr_epoch"}
    f_seq, l_seq = sequence(f, names), sequence(lt, names)
    check(len(f_seq) > 20 and f_seq == l_seq, f"the messages, in order, as Lightning's ({len(f_seq)})")
    shape = lambda s: [(m["metricName"], m["step"], m["epoch"]) for m in s.metrics if m["metricName"] in names]
    check(shape(f) == shape(lt), "the metrics sent: names, steps and epochs as Lightning's")
    rows = csv_rows(f_csv)
    sent = {(m["metricName"], m["step"]): m["metricValue"] for m in f.metrics}
    count = 0
    for row in rows:
        step = int(row.pop("step"))
        for k, v in row.items():
            if k != "epoch":
                check(sent.get((k, step)) == v, f"{k} at step {step} is the CSV value")
                count += 1
    check(count == len(sent), f"every metric sent is a CSV value ({count})")
    want = os.path.join("fulmen-fit", key, "checkpoints")
    check(os.path.relpath(os.path.dirname(f_ckpt), out) == want, f"fulmen's checkpoint under {want}")
    l_want = os.path.join("fulmen-fit", l_key, "checkpoints")
    check(os.path.dirname(l_ckpt) == l_want, f"Lightning's checkpoint under {l_want} too ({l_ckpt})")
    check(os.path.basename(f_ckpt) == os.path.basename(l_ckpt), "the same checkpoint name")
    check(not any(n.endswith(".partial") for n in os.listdir(out)), "no working folder left")


def check_host(binary, work):
    out = os.path.join(work, "host")
    archives = run_binary(binary, out, "host")["archive"]
    check(len(archives) == 2, "two host archives")
    s = upload(archives[0])
    key = "hostrun0123456789abcdef0123456789"
    check(s.meta["offline_id"] == key and s.meta["user_provided_experiment_key"], "the given key")
    check(s.meta["resume_strategy"] == "get" and "connection.get_run" in s.names, "mode get: the upload resumes")
    check(s.meta["workspace"] == "team" and s.meta["project_name"] == "fulmen-host", "workspace and project")
    check(s.meta["tags"] == ["a", "b"], "tags, a repeated one once")
    check(s.others["Name"] == "host run", "the name")
    params = {k: v["paramValue"] for k, v in s.params.items() if v["source"] == "manual"}
    long_name = "n" * 88 + " [truncated]"
    check(params == {"optimizer": "adamw", "lr": 0.002, "layers": 3, "amsgrad": True,
                     long_name: "v" * 988 + " [truncated]"}, f"parameters typed, cut, the last value ({params})")
    logged = [l["payload"]["param"]["paramName"] for l in s.lines if l["type"] == "parameter_msg"]
    check(logged.count("optimizer") == 1 and logged.count("lr") == 2, "a parameter unchanged is not written again")
    metrics = [(m["metricName"], m["metricValue"], m["step"]) for m in s.metrics]
    check(metrics[:5] == [("p_loss", 0.5, 0), ("p_loss", 0.25, 1), ("p_nan", "NaN", 1), ("p_inf", "-Infinity", 2),
                          ("p_tiny", 1e-7, 3)], f"prefixed names, NaN, -Infinity ({metrics[:5]})")
    check(metrics[5] == (("p_" + "n" * 150)[:88] + " [truncated]", 4.0, 4), "a long metric name cut")
    check(all(m["epoch"] is None for m in s.metrics), "no epoch when none is given")
    s2 = upload(archives[1])
    check(os.path.basename(archives[1]) == s2.meta["offline_id"] + ".zip", "mode create: the archive is <key>.zip")
    check(s2.meta["project_name"] is None and ("connection.add_run", (None, None), {"offline": True}) in s2.calls,
          "no project: the upload creates the experiment without one")
    check([(m["metricName"], m["metricValue"]) for m in s2.metrics] == [("loss", 1.0)], "the second logger's metric")
    check(not any(n.endswith(".partial") for n in os.listdir(out)), "no working folder left")


def check_died(binary, work):
    out = os.path.join(work, "died")
    folder = run_binary(binary, out, "died")["work"][0]
    check(os.path.isdir(folder) and not any(n.endswith(".zip") for n in os.listdir(out)),
          "a process that never ended its experiment leaves the working folder, no archive")
    s = upload(folder)
    check([(m["metricName"], m["metricValue"], m["step"]) for m in s.metrics] == [("loss", 0.75, 0), ("loss", 0.5, 1)],
          "comet_ml's upload reads the working folder as it is")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--work")
    args = ap.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="fulmen-comet-")
    os.makedirs(work, exist_ok=True)
    comet_env(work)
    check_host(args.binary, work)
    check_died(args.binary, work)
    check_fit(args.binary, work)
    print(f"comet_logger: {len(CHECKS)} checks passed")


if __name__ == "__main__":
    main()
