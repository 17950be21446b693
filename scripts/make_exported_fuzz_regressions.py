"""Makes the crafted .pt2 inputs of the exported fuzz target.

Writes into tests/fuzz/regressions/exported/ archives derived from
tests/fixtures/exported_nograd.pt2 (one program: forward(x[3, 4]) ->
(loss, z)), made small: node metadata, tensor_values and the sample inputs
left out (the loader reads none of them), JSON without spaces. Each is
replayed by `make test` (tests/fuzz/fuzz_exported.c) and must give a
clear error or a run, never a crash or a caught panic:

  floordiv-int64-min.pt2      a node INT64_MIN // -1 (Python's arithmetic
                              on sizes) before the program's nodes
  unknown-parameter.pt2       the graph reads the parameter "l.missing",
                              which the weights config does not list
  view-reach-wraps.pt2        l.bias stored as 16 dims of size 2^62 + 1 and
                              stride 2^62: the last element's index,
                              16 * 2^124, is 2^128
  view-numel-overflow.pt2     l.bias stored as 3 dims of size 2^32 and
                              stride 0: 2^96 elements over one
  spec-nested-130.pt2         the input spec nested 130 tuples deep
  use-before-definition.pt2   a node moved before the one defining its input
  higher-order-cond.pt2       a node calling torch.ops.higher_order.cond
  empty-2p40.pt2              a node aten.empty([2^40]) whose result
                              nobody reads
  dtype-as-int.pt2            aten._to_copy(x, dtype=-5): an int where the
                              operator takes a ScalarType

Run with any Python 3:  python scripts/make_exported_fuzz_regressions.py
"""
import copy
import json
import os
import sys
import zipfile

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "exported_nograd.pt2")
OUT = os.path.join(ROOT, "tests", "fuzz", "regressions", "exported")
UNREAD = ("data/sample_inputs/", ".data/serialization_id")


def read_fixture():
    """(folder, {name below the folder: bytes}) of the fixture."""
    with zipfile.ZipFile(FIXTURE) as z:
        records = {}
        folder = None
        for info in z.infolist():
            top, rest = info.filename.split("/", 1)
            folder = folder or top
            if not rest.startswith(UNREAD):
                records[rest] = z.read(info)
    return folder, records


def strip(graph):
    """Leaves out what the loader never reads, subgraphs included."""
    graph.pop("tensor_values", None)
    for node in graph["nodes"]:
        node.pop("metadata", None)
        for i in node["inputs"]:
            sub = i["arg"].get("as_graph")
            if sub is not None:
                strip(sub["graph"])


def write(name, folder, records, program, weights):
    records = dict(records)
    records["models/model.json"] = json.dumps(program, separators=(",", ":")).encode()
    records["data/weights/model_weights_config.json"] = json.dumps(weights, separators=(",", ":")).encode()
    path = os.path.join(OUT, name)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for rest, data in records.items():
            # a fixed time: the same archive every run
            z.writestr(zipfile.ZipInfo(f"{folder}/{rest}", date_time=(1980, 1, 1, 0, 0, 0)), data)
    print(path, os.path.getsize(path))


def as_ints(values):
    return [{"as_int": v} for v in values]


def main():
    os.makedirs(OUT, exist_ok=True)
    folder, records = read_fixture()
    program = json.loads(records["models/model.json"])
    strip(program["graph_module"]["graph"])
    weights = json.loads(records["data/weights/model_weights_config.json"])
    graph = program["graph_module"]["graph"]

    def variant(name, edit_program=None, edit_weights=None):
        p, w = copy.deepcopy(program), copy.deepcopy(weights)
        if edit_program:
            edit_program(p["graph_module"])
        if edit_weights:
            edit_weights(w["config"])
        write(name, folder, records, p, w)

    def node(target, inputs, outputs):
        return {"target": target, "inputs": [{"name": n, "arg": a, "kind": 1} for n, a in inputs], "outputs": outputs}

    def floordiv(m):
        m["graph"]["nodes"].insert(
            0,
            node(
                "_operator.floordiv",
                [("", {"as_int": -(2**63)}), ("", {"as_int": -1})],
                [{"as_sym_int": {"as_name": "q"}}],
            ),
        )

    def unknown_parameter(m):
        m["signature"]["input_specs"][0]["parameter"]["parameter_name"] = "l.missing"

    def view(sizes, strides):
        def edit(config):
            meta = config["l.bias"]["tensor_meta"]
            meta["sizes"], meta["strides"] = as_ints(sizes), as_ints(strides)
            meta["storage_offset"] = {"as_int": 0}

        return edit

    def nested_spec(m):
        sig = m["module_call_graph"][0]["signature"]
        protocol, spec = json.loads(sig["in_spec"])
        for _ in range(130):
            spec = {"type": "builtins.tuple", "context": "null", "children_spec": [spec]}
        sig["in_spec"] = json.dumps([protocol, spec])

    def swap(m):
        nodes = m["graph"]["nodes"]
        nodes[1], nodes[2] = nodes[2], nodes[1]

    def cond(m):
        m["graph"]["nodes"][1]["target"] = "torch.ops.higher_order.cond"

    def empty(m):
        m["graph"]["nodes"].insert(
            0,
            node(
                "torch.ops.aten.empty.memory_format",
                [("size", {"as_ints": [2**40]})],
                [{"as_tensor": {"name": "huge"}}],
            ),
        )

    def dtype_as_int(m):
        m["graph"]["nodes"].insert(
            0,
            node(
                "torch.ops.aten._to_copy.default",
                [("self", {"as_tensor": {"name": "x"}}), ("dtype", {"as_int": -5})],
                [{"as_tensor": {"name": "copy"}}],
            ),
        )

    variant("floordiv-int64-min.pt2", floordiv)
    variant("unknown-parameter.pt2", unknown_parameter)
    variant("view-reach-wraps.pt2", edit_weights=view([2**62 + 1] * 16, [2**62] * 16))
    variant("view-numel-overflow.pt2", edit_weights=view([2**32] * 3, [0] * 3))
    variant("spec-nested-130.pt2", nested_spec)
    variant("use-before-definition.pt2", swap)
    variant("higher-order-cond.pt2", cond)
    variant("empty-2p40.pt2", empty)
    variant("dtype-as-int.pt2", dtype_as_int)


if __name__ == "__main__":
    sys.exit(main())
