"""fulmen's W&B logger against W&B's own reader and Lightning's WandbLogger.

    python wandb_logger.py --binary build/interop/wandb_logger --work DIR

The binary (tests/interop/wandb_logger.c) writes W&B offline runs; W&B's
own reader, `wandb leet inspect` (wandb-core, the code `wandb sync` reads
runs with), reads them back as JSON, and:

- fit: the same 2-epoch fit of the same MLP on the same points runs in
  Lightning 2.6 with WandbLogger(offline=True) and a CSVLogger, as the
  binary runs it with its W&B and CSV loggers. Both `.wandb` files hold
  the same metric definitions and config; their history rows, in order,
  have the same `_step`, `trainer/global_step` and keys; each
  side's rows are its CSV file's rows (the step as `trainer/global_step`),
  value for value (the CSV files' parity with Lightning is
  logger_parity.py's and hook_log_parity.py's); the summary is each
  key's last value; the run's name, project, group, job type and tags are
  the logger's; the run ended with exit code 0; ModelCheckpoint wrote
  under save_dir/project/<run id>/checkpoints on both sides.
- host: a host loop's logger: entity, notes, tags (a repeated one kept
  once), prefixed names, NaN and -Infinity, config values typed (string,
  number, boolean) and one longer than two blocks of the file (a record
  in FIRST, MIDDLE and LAST chunks), the exit code
  1 of a "failed" finalize; a second logger's explicit finish; the
  `latest-run` link W&B's reader follows when given the wandb folder.
- a digit changed in a copy of a run's file (the record still decodes)
  makes W&B's reader stop before that record: its checksums are read, so
  the checks above read checked records.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

from blob_lightning import blob_fit, csv_rows, run_binary

CHECKS = []


def check(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)
    CHECKS.append(what)


def wandb_env(work):
    """W&B offline, its caches and settings inside the work folder."""
    env = dict(os.environ, WANDB_MODE="offline", WANDB_SILENT="true")
    for var, sub in [("WANDB_CACHE_DIR", "cache"), ("WANDB_CONFIG_DIR", "config"), ("WANDB_DATA_DIR", "data"),
                     ("XDG_CACHE_HOME", "xdg-cache"), ("XDG_CONFIG_HOME", "xdg-config")]:
        env[var] = os.path.join(work, "wandb-home", sub)
        os.makedirs(env[var], exist_ok=True)
    return env


def inspect(path, env, summary=False):
    """W&B's reader on a run folder or file: its records, or its summary."""
    cmd = [sys.executable, "-m", "wandb", "leet", "inspect", "--json"] + (["--summary"] if summary else []) + [path]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        return None, out.stderr
    if summary:
        return json.loads(out.stdout), out.stderr
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()], out.stderr


def history(records):
    """The history rows, without the wall-clock keys, in order."""
    rows = []
    for r in records:
        if r["type"] == "history":
            item = dict(r["history"]["item"])
            check(item.get("_step") == r["history"].get("step", {}).get("num", 0), "a row's _step is its step")
            check(isinstance(item.pop("_runtime", None), (int, float)), "a row has _runtime")
            check(isinstance(item.pop("_timestamp", None), (int, float)), "a row has _timestamp")
            rows.append(item)
    return rows


def config(records):
    merged = {}
    for r in records:
        if r["type"] == "config":
            merged.update({k: v for k, v in r["config"]["update"].items() if not k.startswith("_")})
    return merged


def rows_match_csv(rows, csv_file_rows, side):
    """Each W&B row is a CSV row: the step as trainer/global_step, every value."""
    check(len(rows) == len(csv_file_rows), f"{side}: one W&B row per CSV row ({len(rows)} and {len(csv_file_rows)})")
    for row, c in zip(rows, csv_file_rows):
        step = c.pop("step")
        check(row["trainer/global_step"] == step, f"{side}: trainer/global_step is the CSV step")
        got = {k: v for k, v in row.items() if k not in ("trainer/global_step", "_step")}
        check(set(got) == set(c), f"{side}: the row's keys are the CSV row's ({sorted(got)} / {sorted(c)})")
        for k, v in c.items():
            check(float(got[k]) == v, f"{side}: {k} at step {step} is the CSV value")


def lightning_fit(work, env):
    """The binary's fit in Lightning, with WandbLogger offline and a CSVLogger."""
    os.environ.update({k: v for k, v in env.items() if k.startswith(("WANDB_", "XDG_"))})
    import wandb
    from lightning.pytorch.loggers import CSVLogger, WandbLogger

    save = os.path.join(work, "lightning")
    wb = WandbLogger(save_dir=save, project="fulmen-fit", name="fit-run", group="blobs", job_type="train",
                     tags=["mlp"], offline=True)
    trainer = blob_fit(save, [wb, CSVLogger(save, flush_logs_every_n_steps=1)])
    run_dir = wb.experiment.dir
    csv_dir = trainer.loggers[1].log_dir
    ckpt = trainer.checkpoint_callback.best_model_path
    wandb.finish()
    # wandb's run.dir is the run folder's files/.
    return os.path.dirname(run_dir), csv_dir, os.path.relpath(ckpt, save)


def check_fit(binary, work, env):
    out = os.path.join(work, "fulmen")
    lines = run_binary(binary, out, "fit")
    f_run, f_csv, f_ckpt = lines["run"][0], lines["csv"][0], lines["ckpt"][0]
    l_run, l_csv, l_ckpt = lightning_fit(work, env)
    f_records, err = inspect(f_run, env)
    check(f_records is not None, f"W&B's reader reads fulmen's run ({err})")
    l_records, err = inspect(l_run, env)
    check(l_records is not None, f"W&B's reader reads Lightning's run ({err})")
    f_run_rec = next(r["run"] for r in f_records if r["type"] == "run")
    run_id = f_run_rec["run_id"]
    check(os.path.basename(f_run).endswith("-" + run_id), "the run folder ends with the run id")
    for key, want in [("project", "fulmen-fit"), ("display_name", "fit-run"), ("run_group", "blobs"),
                      ("job_type", "train"), ("tags", ["mlp"])]:
        check(f_run_rec.get(key) == want, f"the run record's {key}")
    l_run_rec = next(r["run"] for r in l_records if r["type"] == "run")
    for key in ["project", "display_name", "run_group", "job_type", "tags"]:
        check(f_run_rec.get(key) == l_run_rec.get(key), f"{key} as Lightning's run has it")
    metrics = lambda recs: [r["metric"] for r in recs if r["type"] == "metric"]
    check(metrics(f_records) == metrics(l_records), f"metric definitions as Lightning's ({metrics(f_records)})")
    check(config(f_records) == config(l_records) == {"lr": 0.1, "hidden": 8}, "the config (hyperparameters)")
    f_rows, l_rows = history(f_records), history(l_records)
    shape = lambda rows: [(r["_step"], r["trainer/global_step"], sorted(r)) for r in rows]
    check(shape(f_rows) == shape(l_rows), "history rows: _step, trainer/global_step and keys as Lightning's")
    rows_match_csv(f_rows, csv_rows(f_csv), "fulmen")
    rows_match_csv(l_rows, csv_rows(l_csv), "Lightning")
    summary, err = inspect(f_run, env, summary=True)
    check(summary is not None, f"W&B's reader summarizes fulmen's run ({err})")
    last = {}
    for row in f_rows:
        last.update(row)
    got = {k: v for k, v in summary["summary"].items() if k not in ("_runtime", "_timestamp")}
    check(got == last, "the summary is each key's last value")
    check(summary["state"] == "finished" and summary["exit_code"] == 0, "the run finished with exit code 0")
    check(summary["run_id"] == run_id and summary["name"] == "fit-run", "the summary's id and name")
    want_ckpt = os.path.join("fulmen-fit", run_id, "checkpoints")
    check(os.path.relpath(os.path.dirname(f_ckpt), out) == want_ckpt, f"fulmen's checkpoint under {want_ckpt}")
    l_want = os.path.join("fulmen-fit", l_run_rec["run_id"], "checkpoints")
    check(os.path.dirname(l_ckpt) == l_want, f"Lightning's checkpoint under {l_want} too ({l_ckpt})")
    check(os.path.basename(f_ckpt) == os.path.basename(l_ckpt), "the same checkpoint name")
    return f_run


def check_host(binary, work, env):
    out = os.path.join(work, "host")
    runs = run_binary(binary, out, "host")["run"]
    check(len(runs) == 2, "two host runs")
    s, err = inspect(runs[0], env, summary=True)
    check(s is not None, f"W&B's reader summarizes the host run ({err})")
    check(s["run_id"] == "host-run-1" and s["name"] == "host run" and s["entity"] == "team", "id, name, entity")
    check(s["project"] == "fulmen-host" and s["notes"] == 'a "quoted" note', "project and notes")
    check(s["tags"] == ["a", "b"], "tags, a repeated one once")
    check(s["state"] == "failed" and s["exit_code"] == 1, "a failed finalize ends the run with exit code 1")
    check(s["config"] == {"optimizer": "adamw", "lr": 0.001, "layers": 3, "amsgrad": True, "big": "x" * 69999},
          "config values typed, and one longer than two blocks")
    records, _ = inspect(runs[0], env)
    rows = history(records)
    check([r["_step"] for r in rows] == list(range(6)), "_step counts the rows")
    check([r["trainer/global_step"] for r in rows] == [0, 1, 1, 2, 3, 4], "trainer/global_step is the step")
    check(rows[2]["p-nan"] == "NaN" and rows[3]["p-inf"] == "-Infinity", "NaN and -Infinity")
    check(rows[0]["p-loss"] == 0.5 and rows[4]["p-tiny"] == 1e-7, "prefixed names and values")
    s2, err = inspect(runs[1], env, summary=True)
    check(s2 is not None and s2["project"] == "lightning_logs", f"the default project ({err})")
    check(s2["state"] == "finished" and s2["exit_code"] == 0, "finish(0): a second finish changes nothing")
    check(len(s2["run_id"]) == 8 and s2["run_id"].isalnum(), "a generated id of eight characters")
    latest = os.readlink(os.path.join(out, "wandb", "latest-run"))
    check(latest == os.path.basename(runs[1]), f"wandb/latest-run links to the newest run folder ({latest})")
    s3, err = inspect(os.path.join(out, "wandb"), env, summary=True)
    check(s3 is not None and s3["run_id"] == s2["run_id"], f"W&B's reader given the wandb folder reads it ({err})")
    return runs[0]


def check_corruption(run_dir, work, env):
    """A digit of the config's `"hidden"` value changed in a copy (the
    record still decodes, to another number): W&B's reader does not return
    that record or any after it."""
    src = next(os.path.join(run_dir, f) for f in os.listdir(run_dir) if f.endswith(".wandb"))
    whole, err = inspect(src, env)
    check(whole is not None, f"W&B's reader reads the original ({err})")
    data = bytearray(open(src, "rb").read())
    at = data.index(b"hidden")
    digit = data.index(b"8", at)
    check(digit - at < 12, "the value's digit found after its key")
    data[digit] = ord("9")
    copy = os.path.join(work, "corrupt.wandb")
    with open(copy, "wb") as f:
        f.write(data)
    cut, err = inspect(copy, env)
    nums = [r["num"] for r in whole if r["type"] == "config"]
    check("checksum" in err.lower(), f"the reader names the checksum ({err.strip()[:300]})")
    if cut is not None:
        check(cut == whole[:len(cut)], "the records before the change are read as they are")
        check(all(r["num"] < nums[0] for r in cut), f"the changed record is not returned ({len(cut)} records)")
        check(all(r.get("config", {}).get("update", {}).get("hidden") != 9 for r in cut), "no record with the changed value")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--work")
    args = ap.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="fulmen-wandb-")
    os.makedirs(work, exist_ok=True)
    env = wandb_env(work)
    check_host(args.binary, work, env)
    run = check_fit(args.binary, work, env)
    check_corruption(run, work, env)
    print(f"wandb_logger: {len(CHECKS)} checks passed")


if __name__ == "__main__":
    main()
