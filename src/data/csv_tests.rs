//! Tests of `load_csv` (included from csv.rs).
use std::io::Write;

use flate2::write::GzEncoder;
use flate2::Compression;

use super::*;
use crate::data::Dataset;
use crate::test_dirs::TempDir;

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = GzEncoder::new(Vec::new(), Compression::default());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

fn opts(label: Option<i64>) -> CsvOptions {
    CsvOptions { label_column: label, ..Default::default() }
}

fn floats(t: &Tensor) -> Vec<f32> {
    Vec::<f32>::try_from(t.reshape([-1])).unwrap()
}

fn ints(t: &Tensor) -> Vec<i64> {
    Vec::<i64>::try_from(t).unwrap()
}

#[test]
fn no_header_label_first() {
    let dir = TempDir::new("data");
    let p = dir.write("a.csv", b"1,0.5,2\r\n\n0,3,-4\n");
    let ds = load_csv(&p, &opts(Some(0))).unwrap();
    assert_eq!(ds.len(), 2);
    let t = ds.tensors();
    assert_eq!(t.len(), 2);
    assert_eq!(t[0].size(), vec![2, 2]);
    assert_eq!(t[0].kind(), tch::Kind::Float);
    assert_eq!(t[1].kind(), tch::Kind::Int64);
    assert_eq!(floats(&t[0]), vec![0.5, 2., 3., -4.]);
    assert_eq!(ints(&t[1]), vec![1, 0]);
}

#[test]
fn detected_header_label_last() {
    let dir = TempDir::new("data");
    let p = dir.write("h.csv", b"\xEF\xBB\xBFx,y,label\n1,2,3\n4,5e0,6.0\n");
    let ds = load_csv(&p, &opts(Some(-1))).unwrap();
    let t = ds.tensors();
    assert_eq!(floats(&t[0]), vec![1., 2., 4., 5.]);
    assert_eq!(ints(&t[1]), vec![3, 6]);
}

#[test]
fn header_option_and_no_labels() {
    let dir = TempDir::new("data");
    let p = dir.write("n.csv", b"7;8\n1;2\n");
    let semi = CsvOptions { delimiter: b';', ..opts(None) };
    let t = load_csv(&p, &semi).unwrap().tensors();
    assert_eq!(t.len(), 1);
    assert_eq!(floats(&t[0]), vec![7., 8., 1., 2.]);
    let skip = CsvOptions { has_header: Some(true), ..semi.clone() };
    assert_eq!(floats(&load_csv(&p, &skip).unwrap().tensors()[0]), vec![1., 2.]);
    let q = dir.write("t.csv", b"a,b\n1,2\n");
    let e = load_csv(&q, &CsvOptions { has_header: Some(false), ..opts(None) }).unwrap_err();
    assert_eq!(e.code, ErrorCode::Format);
    assert!(e.message.contains("line 1"), "{}", e.message);
}

#[test]
fn scaling_modes() {
    let dir = TempDir::new("data");
    // Label, a varying column, a constant column.
    let p = dir.write("s.csv", b"0,0,3\n1,5,3\n2,10,3\n");
    let load = |scaling| {
        let ds = load_csv(&p, &CsvOptions { scaling, ..opts(Some(0)) }).unwrap();
        floats(&ds.tensors()[0])
    };
    assert_eq!(load(Scaling::None), vec![0., 3., 5., 3., 10., 3.]);
    assert_eq!(load(Scaling::Divide(5.0)), vec![0., 0.6, 1., 0.6, 2., 0.6]);
    assert_eq!(load(Scaling::MinMax), vec![0., 0., 0.5, 0., 1., 0.]);
    let z = load(Scaling::Standardize);
    let s = (50f32 / 3.).sqrt();
    let want = [-5. / s, 0., 0., 0., 5. / s, 0.];
    assert!(z.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-5), "{z:?}");
    let e = load_csv(&p, &CsvOptions { scaling: Scaling::Divide(0.0), ..opts(None) }).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidArgument);
}

#[test]
fn gzip_detected_by_magic() {
    let dir = TempDir::new("data");
    let text = b"label,a\n3,1.5\n4,2.5\n";
    // No .gz extension: detection is by content.
    let p = dir.write("g.data", &gzip(text));
    let t = load_csv(&p, &opts(Some(0))).unwrap().tensors();
    assert_eq!(floats(&t[0]), vec![1.5, 2.5]);
    assert_eq!(ints(&t[1]), vec![3, 4]);
    let q = dir.write("g.csv.gz", &gzip(text));
    assert_eq!(load_csv(&q, &opts(Some(0))).unwrap().len(), 2);
}

#[test]
fn truncated_gzip() {
    let dir = TempDir::new("data");
    let mut text = String::new();
    for i in 0..2000 {
        text.push_str(&format!("{},{},{}\n", i % 10, i * 7 % 13, i * 31 % 101));
    }
    let gz = gzip(text.as_bytes());
    for cut in [gz.len() / 2, gz.len() - 4] {
        let p = dir.write("cut.csv.gz", &gz[..cut]);
        let e = load_csv(&p, &opts(Some(0))).unwrap_err();
        assert_eq!(e.code, ErrorCode::Format, "{}", e.message);
        assert!(e.message.contains("cut.csv.gz"), "{}", e.message);
        assert!(e.message.contains("gzip"), "{}", e.message);
    }
}

#[test]
fn ragged_and_non_numeric_rows() {
    let dir = TempDir::new("data");
    let p = dir.write("r.csv", b"1,2\n3,4\n5\n");
    let e = load_csv(&p, &opts(None)).unwrap_err();
    assert_eq!(e.code, ErrorCode::Format);
    assert!(e.message.contains("r.csv") && e.message.contains("line 3"), "{}", e.message);
    let p = dir.write("x.csv", b"1,2\n\n3,x\n");
    let e = load_csv(&p, &opts(None)).unwrap_err();
    assert!(e.message.contains("line 3") && e.message.contains("column 2"), "{}", e.message);
    assert!(e.message.contains("\"x\""), "{}", e.message);
    let p = dir.write("nan.csv", b"1,2\n3,nan\n");
    assert!(load_csv(&p, &opts(None)).unwrap_err().message.contains("line 2"));
    let p = dir.write("l.csv", b"1,2\n1.5,2\n");
    let e = load_csv(&p, &opts(Some(0))).unwrap_err();
    assert!(e.message.contains("line 2") && e.message.contains("label"), "{}", e.message);
    let e = load_csv(&p, &opts(Some(2))).unwrap_err();
    assert_eq!(e.code, ErrorCode::OutOfRange);
    assert_eq!(load_csv(&p, &opts(Some(-3))).unwrap_err().code, ErrorCode::OutOfRange);
}

#[test]
fn empty_and_missing_files() {
    let dir = TempDir::new("data");
    for (name, bytes) in [("e.csv", &b""[..]), ("b.csv", b"\n \r\n"), ("h.csv", b"a,b\n")] {
        let p = dir.write(name, bytes);
        let e = load_csv(&p, &opts(None)).unwrap_err();
        assert_eq!(e.code, ErrorCode::Format);
        assert!(e.message.contains(name), "{}", e.message);
    }
    let p = dir.write("e.csv.gz", &gzip(b""));
    assert_eq!(load_csv(&p, &opts(None)).unwrap_err().code, ErrorCode::Format);
    let e = load_csv(&dir.join("missing.csv"), &opts(None)).unwrap_err();
    assert_eq!(e.code, ErrorCode::Io);
    assert!(e.message.contains("missing.csv"));
}

#[test]
fn special_files_are_refused_without_waiting() {
    let dir = TempDir::new("data-special");
    crate::test_dirs::assert_special_files_refused(&dir, |p| load_csv(p, &opts(None)));
}

#[test]
fn mnist_sized_file_loads_with_the_right_shapes() {
    let dir = TempDir::new("data");
    let mut text = String::with_capacity(10 << 20);
    let mut state = 12345u64;
    for row in 0..5000 {
        text.push_str(&(row % 10).to_string());
        for _ in 0..784 {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let v = if (state >> 60) < 10 { 0 } else { (state >> 33) % 256 };
            text.push(',');
            text.push_str(&v.to_string());
        }
        text.push('\n');
    }
    let p = dir.write("mnist.csv", text.as_bytes());
    let q = dir.write("mnist.csv.gz", &gzip(text.as_bytes()));
    let o = CsvOptions { scaling: Scaling::Divide(255.0), ..opts(Some(0)) };
    for path in [&p, &q] {
        let start = std::time::Instant::now();
        let ds = load_csv(path, &o).unwrap();
        let took = start.elapsed();
        eprintln!("{} ({} bytes): {took:?}", path.display(), text.len());
        let t = ds.tensors();
        assert_eq!(t[0].size(), vec![5000, 784]);
        assert_eq!(t[1].size(), vec![5000]);
    }
}

/// scikit-learn's iris.csv: a count line (150 rows, 4 features, the class
/// names), then unnamed rows with the class last.
const IRIS_HEAD: &[u8] = b"3,4,setosa,versicolor,virginica\n5.1,3.5,1.4,0.2,0\n7.0,3.2,4.7,1.4,1\n6.3,3.3,6.0,2.5,2\n";

#[test]
fn a_count_line_is_skipped_or_taken_as_a_preamble() {
    let dir = TempDir::new("data");
    let p = dir.write("iris.csv", IRIS_HEAD);
    let skipped = load_csv(&p, &CsvOptions { skip_rows: 1, label_column: Some(-1), ..Default::default() }).unwrap();
    assert_eq!(skipped.len(), 3);
    assert_eq!(ints(&skipped.tensors()[1]), vec![0, 1, 2]);
    // wine.csv's count line is narrower than its rows: detected, it is a
    // preamble, not column names.
    let p = dir.write("wine.csv", b"2,3,class_0\n1,2,3,0\n4,5,6,1\n");
    let wine = load_csv(&p, &opts(Some(-1))).unwrap();
    assert_eq!(floats(&wine.tensors()[0]), vec![1., 2., 3., 4., 5., 6.]);
    // A header that was asked for must fit the rows.
    let asked = CsvOptions { has_header: Some(true), label_column: Some(-1), ..Default::default() };
    let e = load_csv(&p, &asked).unwrap_err();
    assert!(e.message.contains("line 2") && e.message.contains("header on line 1 has 3"), "{}", e.message);
}

#[test]
fn columns_are_chosen_by_name_or_index() {
    let dir = TempDir::new("data");
    let p = dir.write("people.csv", b"age,income,city_code,bought\n30,1000,7,1\n40,2500,3,0\n");
    let named = CsvOptions {
        label_name: Some("bought".into()),
        feature_columns: Some(vec!["income".into(), "age".into()]),
        ..Default::default()
    };
    let ds = load_csv(&p, &named).unwrap();
    assert_eq!(floats(&ds.tensors()[0]), vec![1000., 30., 2500., 40.]);
    assert_eq!(ints(&ds.tensors()[1]), vec![1, 0]);
    let by_index = CsvOptions { feature_columns: Some(vec!["2".into()]), label_column: Some(3), ..Default::default() };
    assert_eq!(floats(&load_csv(&p, &by_index).unwrap().tensors()[0]), vec![7., 3.]);
    let refused = |o: CsvOptions, code: ErrorCode, says: &str| {
        let e = load_csv(&p, &o).unwrap_err();
        assert_eq!(e.code, code, "{}", e.message);
        assert!(e.message.contains(says), "{} (wanted {says:?})", e.message);
    };
    refused(
        CsvOptions { label_name: Some("price".into()), ..Default::default() },
        ErrorCode::InvalidArgument,
        "no column named \"price\"",
    );
    refused(
        CsvOptions {
            label_name: Some("bought".into()),
            feature_columns: Some(vec!["bought".into()]),
            ..Default::default()
        },
        ErrorCode::InvalidArgument,
        "is the label",
    );
    refused(
        CsvOptions { feature_columns: Some(vec!["9".into()]), ..Default::default() },
        ErrorCode::OutOfRange,
        "out of range",
    );
    let unnamed = dir.write("n.csv", b"1,2\n3,4\n");
    let e = load_csv(&unnamed, &CsvOptions { label_name: Some("y".into()), ..Default::default() }).unwrap_err();
    assert!(e.message.contains("needs a header"), "{}", e.message);
}

#[test]
fn a_missing_value_is_named_with_its_line_and_column() {
    let dir = TempDir::new("data");
    let p = dir.write("gaps.csv", b"a,b,label\n1,2,0\n3,,1\n");
    let e = load_csv(&p, &opts(Some(-1))).unwrap_err();
    assert_eq!(e.code, ErrorCode::Format);
    assert!(e.message.contains("line 3: column 2 (\"b\"): a missing value"), "{}", e.message);
    let p = dir.write("na.csv", b"1,NA,0\n");
    let e = load_csv(&p, &CsvOptions { has_header: Some(false), ..opts(Some(-1)) }).unwrap_err();
    assert!(e.message.contains("line 1: column 2: a missing value \"NA\""), "{}", e.message);
}
