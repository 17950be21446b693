#!/usr/bin/env python3
"""Checks that TensorBoard reads a fulmen TensorBoard run back.

Usage:
    cargo test --release -- --ignored write_run_for_tensorboard   # with FULMEN_TB_OUT=/tmp/tbrun
    python scripts/check_tensorboard.py /tmp/tbrun/lightning_logs/version_0 [--serve]

Needs `pip install tensorboard`. Reads the version folder with TensorBoard's
EventAccumulator (whose record reader checks both CRCs of every record), prints
the tags, the scalars and the hparams plugin data, and compares the hparams
content with what torch.utils.tensorboard.summary.hparams would build (rebuilt
here with TensorBoard's own protos). With --serve it also starts the
TensorBoard server on the folder and queries its scalars and hparams HTTP APIs.
"""
import json
import socket
import subprocess
import sys
import time
import urllib.request

from google.protobuf import struct_pb2
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2

EXPECTED_HPARAMS = {"lr": 0.001, "batch_size": 64.0, "optimizer": "adam", "shuffle": True}


def torch_style_hparams(hparam_dict, metric_dict):
    """torch.utils.tensorboard.summary.hparams' three contents, bools typed as bools."""
    ssi = plugin_data_pb2.SessionStartInfo()
    hps = []
    for k, v in hparam_dict.items():
        if isinstance(v, bool):
            ssi.hparams[k].bool_value = v
            hps.append(api_pb2.HParamInfo(name=k, type=api_pb2.DataType.Value("DATA_TYPE_BOOL")))
        elif isinstance(v, (int, float)):
            ssi.hparams[k].number_value = v
            hps.append(api_pb2.HParamInfo(name=k, type=api_pb2.DataType.Value("DATA_TYPE_FLOAT64")))
        else:
            ssi.hparams[k].string_value = v
            hps.append(api_pb2.HParamInfo(name=k, type=api_pb2.DataType.Value("DATA_TYPE_STRING")))
    mts = [api_pb2.MetricInfo(name=api_pb2.MetricName(tag=k)) for k in metric_dict]
    exp = api_pb2.Experiment(hparam_infos=hps, metric_infos=mts)
    sei = plugin_data_pb2.SessionEndInfo(status=api_pb2.Status.Value("STATUS_SUCCESS"))
    return {
        "_hparams_/experiment": plugin_data_pb2.HParamsPluginData(experiment=exp, version=0),
        "_hparams_/session_start_info": plugin_data_pb2.HParamsPluginData(session_start_info=ssi, version=0),
        "_hparams_/session_end_info": plugin_data_pb2.HParamsPluginData(session_end_info=sei, version=0),
    }


def print_media(ea):
    """The images, histograms and texts of the run (tests/interop/logger_parity.py
    compares them with Lightning's)."""
    for tag in ea.Tags()["images"]:
        print(f"Images({tag!r}):", [(e.step, e.width, e.height, len(e.encoded_image_string)) for e in ea.Images(tag)])
    for tag in ea.Tags()["histograms"]:
        print(f"Histograms({tag!r}):", [(e.step, e.histogram_value.num, len(e.histogram_value.bucket))
                                        for e in ea.Histograms(tag)])
    for tag in ea.Tags()["tensors"]:
        print(f"Tensors({tag!r}):", [(e.step, list(e.tensor_proto.string_val)) for e in ea.Tensors(tag)])


def check_accumulator(run_dir):
    ea = EventAccumulator(run_dir, size_guidance={"scalars": 0, "images": 0, "histograms": 0, "tensors": 0})
    ea.Reload()
    print("Tags:", ea.Tags())
    print_media(ea)
    for tag in ea.Tags()["scalars"]:
        print(f"Scalars({tag!r}):", ea.Scalars(tag))
    content = ea.PluginTagToContent("hparams")
    print("PluginTagToContent('hparams') tags:", sorted(content))
    expected = torch_style_hparams(dict(sorted(EXPECTED_HPARAMS.items())), {"hp_metric": -1})
    for tag in sorted(content):
        data = plugin_data_pb2.HParamsPluginData.FromString(content[tag])
        print(f"--- {tag}\n{data}")
        assert data == expected[tag], f"{tag} differs from the torch-style message:\n{expected[tag]}"
        same_bytes = content[tag] == expected[tag].SerializeToString(deterministic=True)
        print(f"{tag}: equal to the torch-style message (bytes identical: {same_bytes})")
    ssi = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"]).session_start_info
    got = {k: getattr(v, v.WhichOneof("kind")) for k, v in ssi.hparams.items()}
    print("hparams read back:", got)
    assert got == EXPECTED_HPARAMS, got
    val = [(s.step, s.value) for s in ea.Scalars("val_loss")]
    assert val == [(4, 0.25)], val
    train = [(s.step, round(s.value, 6)) for s in ea.Scalars("train_loss")]
    assert train == [(s, round(1.0 / (s + 1), 6)) for s in range(5)], train


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, body=None):
    headers = {"X-XSRF-Protected": "1", "Content-Type": "application/json"} if body is not None else {}
    data = json.dumps(body).encode() if body is not None else None
    with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers), timeout=10) as r:
        return json.loads(r.read())


def check_server(run_dir):
    port = free_port()
    cmd = [sys.executable, "-m", "tensorboard.main", "--logdir", run_dir, "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                tags = get(f"{base}/data/plugin/scalars/tags")
                if tags:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        print("server scalars/tags:", json.dumps(tags, sort_keys=True))
        run = next(iter(tags))
        print("server scalars val_loss:", get(f"{base}/data/plugin/scalars/scalars?run={run}&tag=val_loss"))
        exp = get(f"{base}/data/plugin/hparams/experiment", {"experimentName": ""})
        print("server hparams/experiment:", json.dumps(exp, sort_keys=True))
        groups = get(
            f"{base}/data/plugin/hparams/session_groups",
            {
                "experimentName": "",
                "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE", "STATUS_RUNNING"],
                "colParams": [],
                "startIndex": 0,
                "sliceSize": 10,
            },
        )
        print("server hparams/session_groups:", json.dumps(groups, sort_keys=True))
    finally:
        proc.terminate()
        proc.wait()


def main():
    run_dir = sys.argv[1]
    check_accumulator(run_dir)
    if "--serve" in sys.argv[2:]:
        check_server(run_dir)
    print("OK")


if __name__ == "__main__":
    main()
