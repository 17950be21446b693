#!/usr/bin/env python3
"""fulmen's CSV and TensorBoard loggers against Lightning's.

    python logger_parity.py --binary build/interop/logger_parity [--work DIR]

The binary (tests/interop/logger_parity.c) makes a script of logger calls;
this script makes the same calls on Lightning 2.6's loggers, in folders
prepared the same way, and compares:

1. CSV: Lightning's CSVLogger with the same save_dir / name / version (a
   number, a name, or the next free one among the same existing folders) /
   prefix / flush_logs_every_n_steps picks the same folders, writes the
   same metrics.csv byte for byte (and row for row through csv.DictReader)
   and the same hyperparameters in hparams.yaml.
2. TensorBoard: TensorBoard's EventAccumulator reads fulmen's event file
   (checking every record's CRCs) with the same tags, steps and values as
   the same calls on Lightning's TensorBoardLogger and its SummaryWriter
   (`logger.experiment.add_image / add_histogram / add_text`): scalars,
   images (size and decoded pixels), histograms (buckets, counts, min,
   max), texts, the hparams plugin's messages, and hparams.yaml.
3. A fit logging to CSV and TensorBoard at once (the `logger` option's
   pair in one folder, then two logger handles): every CSV cell is a
   TensorBoard scalar of the same tag, step and (f32) value and every
   scalar a CSV cell; both hold the module's hyperparameters; the images,
   histograms and texts a hook logged are there at each epoch's last step
   with the expected pixels.
"""
import argparse
import csv
import io
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import yaml
from PIL import Image
from tensorboard.backend.event_processing import event_accumulator as ea_module
from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2

KEEP_ALL = {ea_module.SCALARS: 0, ea_module.IMAGES: 0, ea_module.HISTOGRAMS: 0, ea_module.TENSORS: 0,
            ea_module.COMPRESSED_HISTOGRAMS: 0}


def prepare(save):
    """The folders both sides find: the next "exp" version is 4, the next
    "lightning_logs" one 3; version_7 holds an old metrics.csv."""
    for d in ["exp/version_3_old", "exp/version_x", "lightning_logs/version_0", "lightning_logs/version_2_backup",
              "version_7"]:
        os.makedirs(os.path.join(save, "csv", d))
    with open(os.path.join(save, "csv", "exp", "version_9"), "w") as f:
        f.write("a file, not a version folder")
    with open(os.path.join(save, "csv", "version_7", "metrics.csv"), "w") as f:
        f.write("old,rows\n1,2\n")


def pixel(c, y, x):
    return np.float32(((c * 7 + y * 3 + x) % 11) / 10.0 - 0.05)


def images():
    chw = np.array([[[pixel(c, y, x) for x in range(5)] for y in range(4)] for c in range(3)], dtype=np.float32)
    hwc = np.array([[[(c * 60 + y * 17 + x * 5) % 256 for c in range(4)] for x in range(5)] for y in range(4)],
                   dtype=np.uint8)
    gray = np.array([[pixel(1, y, x) for x in range(5)] for y in range(4)], dtype=np.float32)
    one = np.array([[[pixel(2, y, x) for x in range(5)] for y in range(4)]], dtype=np.float32)
    return chw, hwc, gray, one


def histograms():
    h32 = np.array([math.sin(i) * 3.0 ** (i % 7 - 3) for i in range(1000)], dtype=np.float32)
    h64 = np.array([0.0, 0.0, 1e-13, -1e-13, 1e19, -2.5, 7.0, 1e-12], dtype=np.float64)
    return h32, h64


def lightning_side(save):
    """The binary's calls on Lightning's loggers; their log dirs by label."""
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    root = os.path.join(save, "csv")
    dirs = {}
    a = CSVLogger(root, name="exp", prefix="p", flush_logs_every_n_steps=2)
    a.log_hyperparams({"lr": 0.1, "name": "mlp", "depth": 3})
    a.log_metrics({"loss": 1.0, "epoch": 0.0}, step=0)
    a.log_metrics({"val_acc": 1e-5, "zeta": 1e16}, step=1)
    a.log_metrics({"a,b": 2.5}, step=2)
    a.log_metrics({"loss": float(np.float32(0.1)), "tiny": 1e-300, "neg": -0.0}, step=3)
    a.log_metrics({}, step=4)
    a.log_metrics({'q"uote': 3.0, "missing": math.nan}, step=5)
    a.log_metrics({"loss": 123456789.125}, step=99)
    a.finalize("success")
    dirs["csv-a"] = a.log_dir
    b = CSVLogger(root, name=None, version=7)
    b.log_metrics({"x": 1.5}, step=0)
    b.finalize("success")
    dirs["csv-b"] = b.log_dir
    c = CSVLogger(root, name="exp", version="named-run")
    c.log_metrics({"y": 2.0}, step=10)
    c.finalize("success")
    dirs["csv-c"] = c.log_dir
    d = CSVLogger(root)
    d.log_metrics({"z": 0.5}, step=0)
    d.finalize("success")
    dirs["csv-d"] = d.log_dir

    tb = TensorBoardLogger(os.path.join(save, "tb"), name="tbexp", prefix="train")
    # Sorted, as fulmen keeps hyperparameters (the plugin lists them in order).
    tb.log_hyperparams({"batch_size": 64, "lr": 0.001, "optimizer": "adam", "shuffle": True})
    tb.log_metrics({"loss": 0.5}, step=1)
    tb.log_metrics({"acc": 0.75, "loss": 0.25}, step=2)
    chw, hwc, gray, one = images()
    w = tb.experiment
    w.add_image("chw", chw, 3, dataformats="CHW")
    w.add_image("hwc_u8", hwc, 3, dataformats="HWC")
    w.add_image("gray", gray, 4, dataformats="HW")
    w.add_image("one_channel", one, 4, dataformats="CHW")
    h32, h64 = histograms()
    w.add_histogram("hist", h32, 5)
    w.add_histogram("hist64", h64, 6)
    w.add_text("notes", "**bold** and `code`", 7)
    tb.finalize("success")
    dirs["tb"] = tb.log_dir
    return dirs


def read(path):
    with open(path, "rb") as f:
        return f.read()


def yaml_of(path):
    return yaml.safe_load(read(path)) if os.path.exists(path) else None


def check_csv(label, ours, theirs, our_save, their_save):
    rel = os.path.relpath(ours, our_save), os.path.relpath(theirs, their_save)
    assert rel[0] == rel[1], f"{label}: fulmen wrote to {rel[0]}, Lightning to {rel[1]}"
    a, b = read(os.path.join(ours, "metrics.csv")), read(os.path.join(theirs, "metrics.csv"))
    assert a == b, f"{label}: metrics.csv differs\nfulmen:    {a!r}\nLightning: {b!r}"
    rows = [list(csv.DictReader(io.StringIO(x.decode(), newline=""))) for x in (a, b)]
    assert rows[0] == rows[1]
    hp = [yaml_of(os.path.join(d, "hparams.yaml")) for d in (ours, theirs)]
    assert hp[0] == hp[1], f"{label}: hparams.yaml {hp[0]} vs Lightning's {hp[1]}"
    print(f"ok   {label}: {rel[0]}, metrics.csv identical ({len(a)} bytes, {len(rows[0])} rows), "
          f"hparams {hp[0]}")


def accumulator(d):
    ea = ea_module.EventAccumulator(d, size_guidance=KEEP_ALL)
    ea.Reload()
    return ea


def decoded(event):
    img = Image.open(io.BytesIO(event.encoded_image_string))
    return img.mode, np.asarray(img)


def event_files(d):
    return sorted(f for f in os.listdir(d) if f.startswith("events.out.tfevents."))


def as_torch_types(content):
    """fulmen's hparams plugin message with true / false typed as torch's
    hparams() types a Python bool: a number (isinstance(True, int)) of
    DATA_TYPE_FLOAT64, where fulmen writes DATA_TYPE_BOOL and a bool_value.
    That is the one difference from Lightning, mapped here."""
    d = plugin_data_pb2.HParamsPluginData.FromString(content)
    if d.HasField("experiment"):
        for info in d.experiment.hparam_infos:
            if info.type == api_pb2.DataType.Value("DATA_TYPE_BOOL"):
                info.type = api_pb2.DataType.Value("DATA_TYPE_FLOAT64")
    if d.HasField("session_start_info"):
        values = d.session_start_info.hparams
        for key in list(values):
            if values[key].WhichOneof("kind") == "bool_value":
                values[key].number_value = float(values[key].bool_value)
    return d


def check_tensorboard(ours, theirs):
    rel = os.path.basename(os.path.dirname(ours)), os.path.basename(ours)
    assert rel == (os.path.basename(os.path.dirname(theirs)), os.path.basename(theirs)), (ours, theirs)
    assert len(event_files(ours)) == len(event_files(theirs)) == 1
    a, b = accumulator(ours), accumulator(theirs)
    for kind in ("scalars", "images", "histograms", "tensors"):
        assert sorted(a.Tags()[kind]) == sorted(b.Tags()[kind]), f"{kind}: {a.Tags()[kind]} vs {b.Tags()[kind]}"
    for tag in a.Tags()["scalars"]:
        x = [(e.step, e.value) for e in a.Scalars(tag)]
        y = [(e.step, e.value) for e in b.Scalars(tag)]
        assert x == y, f"scalar {tag}: {x} vs {y}"
    for tag in a.Tags()["images"]:
        x, y = a.Images(tag), b.Images(tag)
        assert [(e.step, e.width, e.height) for e in x] == [(e.step, e.width, e.height) for e in y], tag
        for i, j in zip(x, y):
            (mode_a, px_a), (mode_b, px_b) = decoded(i), decoded(j)
            assert mode_a == mode_b and np.array_equal(px_a, px_b), f"image {tag}: {mode_a} {px_a} vs {mode_b} {px_b}"
    for tag in a.Tags()["histograms"]:
        x, y = a.Histograms(tag), b.Histograms(tag)
        assert len(x) == len(y) == 1, tag
        hx, hy = x[0].histogram_value, y[0].histogram_value
        assert x[0].step == y[0].step, tag
        same = (hx.min, hx.max, hx.num, list(hx.bucket_limit), list(hx.bucket)) == \
               (hy.min, hy.max, hy.num, list(hy.bucket_limit), list(hy.bucket))
        assert same, f"histogram {tag}: {hx} vs {hy}"
        for field in ("sum", "sum_squares"):
            assert math.isclose(getattr(hx, field), getattr(hy, field), rel_tol=1e-12), (tag, field)
    for tag in a.Tags()["tensors"]:
        x = [(e.step, e.tensor_proto) for e in a.Tensors(tag)]
        y = [(e.step, e.tensor_proto) for e in b.Tensors(tag)]
        assert x == y, f"tensor {tag}: {x} vs {y}"
        assert a.SummaryMetadata(tag).plugin_data == b.SummaryMetadata(tag).plugin_data, tag
    for plugin in ("hparams", "text"):
        x, y = a.PluginTagToContent(plugin), b.PluginTagToContent(plugin)
        assert sorted(x) == sorted(y), f"{plugin} tags {sorted(x)} vs {sorted(y)}"
        for tag in x:
            if plugin == "hparams":
                mx, my = as_torch_types(x[tag]), plugin_data_pb2.HParamsPluginData.FromString(y[tag])
                assert mx == my, f"{tag}:\n{mx}\nvs Lightning's\n{my}"
            else:
                assert x[tag] == y[tag], tag
    hp = [yaml_of(os.path.join(d, "hparams.yaml")) for d in (ours, theirs)]
    assert hp[0] == hp[1], f"hparams.yaml {hp[0]} vs {hp[1]}"
    print(f"ok   tensorboard: {sorted(a.Tags()['scalars'])}, images {sorted(a.Tags()['images'])}, histograms "
          f"{sorted(a.Tags()['histograms'])}, texts {sorted(a.Tags()['tensors'])} read back by EventAccumulator "
          f"as Lightning's, hparams messages equal (booleans typed as booleans, torch's as numbers)")


def ssi_hparams(ea):
    content = ea.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    ssi = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info
    return {k: getattr(v, v.WhichOneof("kind")) for k, v in ssi.hparams.items()}


def check_fit(label, csv_dir, tb_dir):
    with open(os.path.join(csv_dir, "metrics.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    cells = {(col, int(row["step"]), float(np.float32(float(v))))
             for row in rows for col, v in row.items() if col != "step" and v != ""}
    files = event_files(tb_dir)
    assert len(files) == 1, files
    ea = accumulator(tb_dir)
    scalars = {(tag, e.step, e.value) for tag in ea.Tags()["scalars"] if tag != "hp_metric" for e in ea.Scalars(tag)}
    assert cells == scalars, f"{label}: CSV only {sorted(cells - scalars)}, TensorBoard only {sorted(scalars - cells)}"
    names = {c for c, _, _ in cells}
    assert {"epoch", "train_loss_step", "train_loss_epoch", "val_loss"} <= names, names
    want = {"lr": 0.1, "hidden": 8, "activation": "tanh"}
    assert yaml_of(os.path.join(csv_dir, "hparams.yaml")) == want
    assert yaml_of(os.path.join(tb_dir, "hparams.yaml")) == want
    assert ssi_hparams(ea) == want, ssi_hparams(ea)
    steps = [4, 8]  # the global step at each epoch's end (4 batches per epoch)
    assert [e.step for e in ea.Images("epoch_image")] == steps
    for e in ea.Images("epoch_image"):
        img = np.array([[[pixel(c, y, x + e.step) for x in range(2)] for y in range(2)] for c in range(3)])
        want_px = np.clip(img.transpose(1, 2, 0) * np.float32(255), 0, 255).astype(np.uint8)
        assert np.array_equal(decoded(e)[1], want_px), e.step
    assert [e.step for e in ea.Histograms("epoch_hist")] == steps
    texts = [(e.step, list(e.tensor_proto.string_val)) for e in ea.Tensors("epoch_text/text_summary")]
    assert texts == [(s, [b"epoch done"]) for s in steps], texts
    print(f"ok   {label}: {len(cells)} CSV cells = the TensorBoard scalars, hparams {want} in both, "
          f"media at steps {steps}")


def run_binary(binary, out):
    proc = subprocess.run([binary, out], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{binary} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return dict(line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--binary", required=True)
    p.add_argument("--work")
    a = p.parse_args()
    if a.work:
        shutil.rmtree(a.work, ignore_errors=True)
        work = a.work
    else:
        work = tempfile.mkdtemp(prefix="fulmen-logger-parity-")
    ours, theirs = os.path.join(work, "fulmen"), os.path.join(work, "lightning")
    prepare(ours)
    prepare(theirs)
    our_dirs = run_binary(os.path.abspath(a.binary), ours)
    their_dirs = lightning_side(theirs)
    for label in ("csv-a", "csv-b", "csv-c", "csv-d"):
        check_csv(label, our_dirs[label], their_dirs[label], os.path.join(ours, "csv"), os.path.join(theirs, "csv"))
    check_tensorboard(our_dirs["tb"], their_dirs["tb"])
    for label in ("trainer-option", "trainer-handles"):
        check_fit(label, our_dirs[f"{label}-csv"], our_dirs[f"{label}-tb"])
    print("logger parity: 7 passed, 0 failed")


if __name__ == "__main__":
    main()
