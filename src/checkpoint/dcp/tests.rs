use super::cut::Span;
use super::metadata::{self, Chunk, Entry, Location, Metadata};
use super::store::{self, DataFiles};
use super::tree::{self, PathItem};
use super::*;
use tch::Kind;

fn key(k: &str) -> PathItem {
    PathItem::Key(k.into())
}

#[test]
fn metadata_reads_back_what_it_writes() {
    let at = |file: &str, offset, length| Location { file: file.into(), offset, length };
    let meta = Metadata {
        entries: vec![
            (
                "model.w".into(),
                Entry::Tensor {
                    kind: Kind::Float,
                    size: vec![5, 3],
                    chunks: vec![
                        Chunk { offsets: vec![0, 0], sizes: vec![3, 3], at: at("__0_0.distcp", 0, 100) },
                        Chunk { offsets: vec![3, 0], sizes: vec![2, 3], at: at("__1_0.distcp", 0, 90) },
                    ],
                },
                vec![key("model"), key("w")],
            ),
            (
                "optimizer_0.param_groups.0.lr".into(),
                Entry::Bytes(at("__0_0.distcp", 100, 40)),
                vec![key("optimizer_0"), key("param_groups"), PathItem::Index(0), key("lr")],
            ),
            (
                "model.step".into(),
                Entry::Tensor {
                    kind: Kind::BFloat16,
                    size: vec![],
                    chunks: vec![Chunk { offsets: vec![], sizes: vec![], at: at("__0_0.distcp", 140, 7) }],
                },
                vec![key("model"), key("step")],
            ),
        ],
    };
    let bytes = metadata::write(&meta, "id").unwrap();
    assert_eq!(metadata::read(&bytes, "test").unwrap(), meta);
}

#[test]
fn metadata_refuses_what_it_does_not_know() {
    // A global outside the dataclasses, and a storage path leaving the folder.
    let mut evil = vec![0x80, 2];
    evil.extend_from_slice(b"cos\nsystem\n)\x81.");
    assert!(metadata::read(&evil, "evil").unwrap_err().message.contains("outside the safe subset"));
    let meta = Metadata {
        entries: vec![(
            "x".into(),
            Entry::Bytes(Location { file: "../escape".into(), offset: 0, length: 1 }),
            vec![key("x")],
        )],
    };
    let bytes = metadata::write(&meta, "id").unwrap();
    assert!(metadata::read(&bytes, "test").unwrap_err().message.contains("not a plain file name"));
}

#[test]
fn flatten_and_unflatten_follow_torch() {
    let t = || Value::Tensor(Tensor::from_slice(&[1.0f32, 2.0]));
    let state = Value::Dict(vec![
        (Value::Str("model".into()), Value::Dict(vec![(Value::Str("a.weight".into()), t())])),
        (
            Value::Str("optimizer_0".into()),
            Value::Dict(vec![
                (
                    Value::Str("state".into()),
                    Value::Dict(vec![(Value::Int(0), Value::Dict(vec![(Value::Str("m".into()), t())]))]),
                ),
                (
                    Value::Str("param_groups".into()),
                    Value::List(vec![Value::Dict(vec![
                        (Value::Str("lr".into()), Value::Float(0.1)),
                        (Value::Str("params".into()), Value::List(vec![Value::Int(0)])),
                        (Value::Str("betas".into()), Value::Tuple(vec![Value::Float(0.9), Value::Float(0.99)])),
                    ])]),
                ),
            ]),
        ),
        (Value::Str("empty".into()), Value::Dict(vec![])),
    ]);
    let leaves = tree::flatten(&state).unwrap();
    let names: Vec<&str> = leaves.iter().map(|l| l.fqn.as_str()).collect();
    assert_eq!(
        names,
        [
            "model.a.weight",
            "optimizer_0.state.0.m",
            "optimizer_0.param_groups.0.lr",
            "optimizer_0.param_groups.0.params",
            "optimizer_0.param_groups.0.betas"
        ]
    );
    assert_eq!(leaves[0].path, [key("model"), key("a.weight")]);
    let back =
        tree::unflatten(leaves.iter().rev().map(|l| (l.path.clone(), Value::Str(l.fqn.clone()))).collect()).unwrap();
    let groups = back.get("optimizer_0").and_then(|o| o.get("param_groups"));
    assert!(matches!(groups, Some(Value::List(g)) if g.len() == 1));
    // A gap among a list's indices, and a leaf used as a container.
    let gap = vec![(vec![key("l"), PathItem::Index(1)], Value::Int(1))];
    assert!(tree::unflatten(gap).is_err());
    let clash = vec![(vec![key("a")], Value::Int(1)), (vec![key("a"), key("b")], Value::Int(2))];
    assert!(tree::unflatten(clash).is_err());
}

#[test]
fn optimizer_states_are_named_and_numbered_back() {
    let state = Value::Dict(vec![
        (Value::Str("state".into()), Value::Dict(vec![(Value::Int(1), Value::Int(7))])),
        (
            Value::Str("param_groups".into()),
            Value::List(vec![Value::Dict(vec![(
                Value::Str("params".into()),
                Value::List(vec![Value::Int(0), Value::Int(1)]),
            )])]),
        ),
    ]);
    let named = by_name(state, &["a".into(), "b".into()]).unwrap();
    assert!(matches!(named.get("state"), Some(Value::Dict(e)) if matches!(&e[0].0, Value::Str(s) if s == "b")));
    let numbered = by_number(named, "test").unwrap();
    assert!(matches!(numbered.get("state"), Some(Value::Dict(e)) if matches!(e[0].0, Value::Int(1))));
    let unknown = Value::Dict(vec![(Value::Str("state".into()), Value::Dict(vec![(Value::Int(5), Value::Int(7))]))]);
    assert!(by_name(unknown, &["a".into()]).is_err());
}

#[test]
fn chunks_are_put_together_and_checked() {
    let dir = crate::test_dirs::TempDir::new("dcp-chunks");
    let full = Tensor::arange(15, (Kind::Float, tch::Device::Cpu)).reshape([5, 3]);
    let top = Value::Tensor(full.narrow(0, 0, 3).contiguous());
    let bottom = Value::Tensor(full.narrow(0, 3, 2).contiguous());
    let places = store::write_pieces(&dir.join("__0_0.distcp"), &[&top, &bottom]).unwrap();
    let at = |i: usize| Location { file: "__0_0.distcp".into(), offset: places[i].0, length: places[i].1 };
    let chunk = |o: i64, n: i64, i: usize| Chunk { offsets: vec![o, 0], sizes: vec![n, 3], at: at(i) };
    let mut files = DataFiles::new(&dir);
    let got = files.tensor("w", Kind::Float, &[5, 3], &[chunk(0, 3, 0), chunk(3, 2, 1)]).unwrap();
    assert!(got.equal(&full));
    let mut err = |chunks: &[Chunk], size: &[i64]| files.tensor("w", Kind::Float, size, chunks).unwrap_err().message;
    assert!(err(&[chunk(0, 3, 0)], &[5, 3]).contains("hold 9 of its 15"));
    assert!(err(&[chunk(0, 3, 0), chunk(2, 3, 0)], &[5, 3]).contains("overlap"));
    assert!(err(&[chunk(0, 3, 0), chunk(4, 2, 1)], &[5, 3]).contains("outside"));
    // A size the files cannot hold is refused before it is allocated.
    assert!(err(&[chunk(0, 3, 0), chunk(3, 2, 1)], &[1 << 40, 3]).contains("elements"));
    let past = Chunk {
        offsets: vec![0, 0],
        sizes: vec![5, 3],
        at: Location { offset: places[1].0, length: 1 << 30, ..at(1) },
    };
    assert!(err(&[past], &[5, 3]).contains("past the end"));
    // Chunks that share bytes (a small file made to fill a large tensor)
    // are refused, in one tensor and across two; reading one again is not.
    let twice = [chunk(0, 2, 1), chunk(2, 2, 1)];
    let e = files.tensor("v", Kind::Float, &[4, 3], &twice).unwrap_err();
    assert!(e.message.contains("another item's"), "{e}");
    let e = files.tensor("u", Kind::Float, &[3, 3], &[chunk(0, 3, 0)]).unwrap_err();
    assert!(e.message.contains("another item's"), "{e}");
    assert!(files.tensor("w", Kind::Float, &[5, 3], &[chunk(0, 3, 0), chunk(3, 2, 1)]).is_ok());
}

#[test]
fn data_file_names() {
    assert!(store::is_data_file("__0_0.distcp"));
    assert!(store::is_data_file("__12_3.distcp"));
    assert!(!store::is_data_file("__a_0.distcp"));
    assert!(!store::is_data_file("__0.distcp"));
    assert!(!store::is_data_file("meta.pt"));
}

/// A directory PyTorch's `dcp.save` wrote (scripts/make_dcp_fixture.py).
#[test]
fn reads_what_torch_wrote() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dcp_torch");
    assert!(is_sharded_dir(&dir));
    let top = load(&dir, false, None).unwrap();
    assert!(matches!(top.get("epoch"), Some(Value::Int(3))));
    let Some(Value::Tensor(w)) = top.get("state_dict").and_then(|s| s.get("net.w")) else { panic!("no net.w") };
    assert!(w.equal(&Tensor::arange(6, (Kind::Float, tch::Device::Cpu)).reshape([2, 3])));
    let opt = match top.get("optimizer_states") {
        Some(Value::List(o)) if o.len() == 1 => &o[0],
        other => panic!("optimizer_states: {other:?}"),
    };
    // Numbered again in the order the group lists them.
    let Some(Value::Dict(state)) = opt.get("state") else { panic!("no state") };
    assert!(matches!(state[0].0, Value::Int(0)));
    let Some(Value::List(groups)) = opt.get("param_groups") else { panic!("no groups") };
    assert!(matches!(groups[0].get("params"), Some(Value::List(p)) if matches!(p[..], [Value::Int(0), Value::Int(1)])));
    assert!(matches!(groups[0].get("betas"), Some(Value::Tuple(b)) if b.len() == 2));
    let weights = load(&dir, true, None).unwrap();
    assert!(weights.get("optimizer_states").is_none());
}

/// A rank-local read takes its rows from the chunks that overlap them
/// only: a chunk elsewhere is never read (its bytes may be anything).
#[test]
fn a_rank_reads_only_the_chunks_of_its_rows() {
    let dir = crate::test_dirs::TempDir::new("dcp-rows");
    let full = Tensor::arange(15, (Kind::Float, tch::Device::Cpu)).reshape([5, 3]);
    // Saved by three ranks of 2 rows each (the last holding 1 real row).
    let pieces: Vec<Value> =
        [(0, 2), (2, 2), (4, 1)].iter().map(|(o, n)| Value::Tensor(full.narrow(0, *o, *n).contiguous())).collect();
    let refs: Vec<&Value> = pieces.iter().collect();
    let places = store::write_pieces(&dir.join("__0_0.distcp"), &refs).unwrap();
    let at = |i: usize| Location { file: "__0_0.distcp".into(), offset: places[i].0, length: places[i].1 };
    let chunks = vec![
        Chunk { offsets: vec![0, 0], sizes: vec![2, 3], at: at(0) },
        Chunk { offsets: vec![2, 0], sizes: vec![2, 3], at: at(1) },
        Chunk { offsets: vec![4, 0], sizes: vec![1, 3], at: at(2) },
    ];
    let rows = |first, len| Span { dim: 0, first, len };
    let mut files = DataFiles::new(&dir);
    // Two ranks of 3 rows: rank 1 holds rows 3, 4 and a zero row.
    let rank1 = files.span("w", Kind::Float, &[5, 3], &chunks, rows(3, 3)).unwrap();
    let want = Tensor::cat(&[full.narrow(0, 3, 2), Tensor::zeros([1, 3], (Kind::Float, tch::Device::Cpu))], 0);
    assert!(rank1.equal(&want));
    let rank0 = files.span("w", Kind::Float, &[5, 3], &chunks, rows(0, 3)).unwrap();
    assert!(rank0.equal(&full.narrow(0, 0, 3)));
    // The first chunk's bytes spoiled: rank 1 never reads them, a whole read does.
    drop(files);
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(dir.join("__0_0.distcp")).unwrap();
        f.write_all_at(&vec![0xAB; places[0].1 as usize], places[0].0).unwrap();
    }
    let mut files = DataFiles::new(&dir);
    assert!(files.span("w", Kind::Float, &[5, 3], &chunks, rows(3, 3)).unwrap().equal(&want));
    assert!(files.tensor("w", Kind::Float, &[5, 3], &chunks).is_err());
    // A 0-dim tensor is one row: rank 0 holds it, rank 1 a zero.
    let scalar = Value::Tensor(Tensor::from(7.0f32));
    let places = store::write_pieces(&dir.join("__1_0.distcp"), &[&scalar]).unwrap();
    let one = vec![Chunk {
        offsets: vec![],
        sizes: vec![],
        at: Location { file: "__1_0.distcp".into(), offset: places[0].0, length: places[0].1 },
    }];
    assert_eq!(Vec::<f32>::try_from(files.span("s", Kind::Float, &[], &one, rows(0, 1)).unwrap()).unwrap(), [7.0]);
    assert_eq!(Vec::<f32>::try_from(files.span("s", Kind::Float, &[], &one, rows(1, 1)).unwrap()).unwrap(), [0.0]);
}

/// A tensor-parallel rank reads its columns: from chunks cut by rows
/// (another job's FSDP checkpoint) and from chunks cut by columns (its
/// own), only those that overlap them.
#[test]
fn a_rank_reads_its_columns_from_chunks_cut_either_way() {
    let dir = crate::test_dirs::TempDir::new("dcp-columns");
    let full = Tensor::arange(24, (Kind::Float, tch::Device::Cpu)).reshape([4, 6]);
    let by_rows: Vec<Value> = [0, 2].iter().map(|o| Value::Tensor(full.narrow(0, *o, 2).contiguous())).collect();
    let by_columns: Vec<Value> = [0, 3].iter().map(|o| Value::Tensor(full.narrow(1, *o, 3).contiguous())).collect();
    let refs: Vec<&Value> = by_rows.iter().chain(&by_columns).collect();
    let places = store::write_pieces(&dir.join("__0_0.distcp"), &refs).unwrap();
    let at = |i: usize| Location { file: "__0_0.distcp".into(), offset: places[i].0, length: places[i].1 };
    let row_chunks = vec![
        Chunk { offsets: vec![0, 0], sizes: vec![2, 6], at: at(0) },
        Chunk { offsets: vec![2, 0], sizes: vec![2, 6], at: at(1) },
    ];
    let column_chunks = vec![
        Chunk { offsets: vec![0, 0], sizes: vec![4, 3], at: at(2) },
        Chunk { offsets: vec![0, 3], sizes: vec![4, 3], at: at(3) },
    ];
    let columns = |first| Span { dim: 1, first, len: 3 };
    let mut files = DataFiles::new(&dir);
    for chunks in [&row_chunks, &column_chunks] {
        for first in [0, 3] {
            let got = files.span("w", Kind::Float, &[4, 6], chunks, columns(first)).unwrap();
            assert!(got.equal(&full.narrow(1, first, 3)), "columns from {first} of {chunks:?}");
        }
    }
    // The first column chunk spoiled: rank 1 never reads it.
    drop(files);
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(dir.join("__0_0.distcp")).unwrap();
        f.write_all_at(&vec![0xAB; places[2].1 as usize], places[2].0).unwrap();
    }
    let mut files = DataFiles::new(&dir);
    assert!(files.span("w", Kind::Float, &[4, 6], &column_chunks, columns(3)).unwrap().equal(&full.narrow(1, 3, 3)));
    assert!(files.span("w", Kind::Float, &[4, 6], &column_chunks, columns(0)).is_err());
    // A span past the tensor's dimensions is refused.
    assert!(files.span("w", Kind::Float, &[4, 6], &row_chunks, Span { dim: 2, first: 0, len: 1 }).is_err());
}

/// Which tensors a rank reads in part: its sharded parameters under the
/// run's prefix (or another one), and their optimizer states of the full
/// shape; everything else whole.
#[test]
fn local_rows_select_sharded_parameters_and_their_states() {
    let cut = |shape: Vec<i64>, per_rank| Cut { shape, dim: 0, per_rank, padded: true };
    let local = LocalRows::new(
        vec![
            ("layer.weight".into(), cut(vec![5, 3], 3)),
            ("tied.weight".into(), cut(vec![5, 3], 3)),
            ("s".into(), cut(vec![], 1)),
            ("columns.weight".into(), Cut { shape: vec![4, 6], dim: 1, per_rank: 3, padded: false }),
            ("uneven.weight".into(), Cut { shape: vec![4, 5], dim: 1, per_rank: 3, padded: false }),
        ],
        ["layer.weight", "layer.bias", "tied.weight", "s", "columns.weight", "uneven.weight", "outer.layer.weight"]
            .map(String::from),
        1,
        "model.",
    );
    let model = |k: &str| vec![key("model"), key(k)];
    let rows = |path: &[PathItem], size: &[i64]| local.span_of(path, size).unwrap();
    assert_eq!(rows(&model("model.layer.weight"), &[5, 3]), Some(Span { dim: 0, first: 3, len: 3 }));
    assert_eq!(rows(&model("net.layer.weight"), &[5, 3]).map(|r| r.first), Some(3));
    assert_eq!(rows(&[key("state_dict"), key("layer.weight")], &[5, 3]).map(|r| r.len), Some(3));
    assert_eq!(rows(&model("model.columns.weight"), &[4, 6]), Some(Span { dim: 1, first: 3, len: 3 }));
    // Tensor parallelism's uneven parts: rank 1 holds the last 2 columns.
    assert_eq!(rows(&model("model.uneven.weight"), &[4, 5]), Some(Span { dim: 1, first: 3, len: 2 }));
    // Every name of a tied parameter.
    assert!(rows(&model("model.tied.weight"), &[5, 3]).is_some());
    // Only one dotted component is taken off an unknown prefix.
    assert_eq!(rows(&model("a.b.layer.weight"), &[5, 3]), None);
    // A name of the model that is not sharded is never taken for another
    // one without its first component.
    assert_eq!(rows(&model("outer.layer.weight"), &[5, 3]), None);
    // A model entry of another shape is another model's: refused.
    let e = local.span_of(&model("model.layer.weight"), &[4, 3]).unwrap_err();
    assert!(e.message.contains("[4, 3]") && e.message.contains("[5, 3]"), "{e}");
    assert_eq!(rows(&model("model.layer.bias"), &[5]), None);
    let state = |k: &str| vec![key("optimizer_0"), key("state"), key("model.layer.weight"), key(k)];
    assert!(rows(&state("exp_avg"), &[5, 3]).is_some());
    // An optimizer state of another shape (a step count) is read whole.
    assert_eq!(rows(&state("step"), &[]), None);
    // 0-dim parameters are never read as rows.
    assert_eq!(rows(&model("model.s"), &[]), None);
    assert_eq!(rows(&[key("callbacks"), key("model.layer.weight")], &[5, 3]), None);
}

/// An optimizer saved without per-parameter state (SGD without momentum:
/// torch's flattening keeps no leaf of its empty `state`) reads back with
/// an empty `state`, as a Lightning checkpoint must hold one.
#[test]
fn an_optimizer_without_state_reads_back_with_an_empty_one() {
    let groups = Value::List(vec![Value::Dict(vec![
        (Value::Str("lr".into()), Value::Float(0.1)),
        (Value::Str("params".into()), Value::List(vec![Value::Str("w".into())])),
    ])]);
    let saved = Value::Dict(vec![(Value::Str("param_groups".into()), groups)]);
    let read = by_number(with_state(saved), "test").unwrap();
    assert!(matches!(read.get("state"), Some(Value::Dict(e)) if e.is_empty()));
    let Some(Value::List(g)) = read.get("param_groups") else { panic!("no param_groups") };
    assert!(matches!(g[0].get("params"), Some(Value::List(p)) if matches!(p[..], [Value::Int(0)])));
    // One that has a state keeps it.
    let kept =
        with_state(Value::Dict(vec![(Value::Str("state".into()), Value::Dict(vec![(Value::Int(0), Value::Int(1))]))]));
    assert!(matches!(kept.get("state"), Some(Value::Dict(e)) if e.len() == 1));
}
