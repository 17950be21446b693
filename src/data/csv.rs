//! Loading a numeric CSV file (plain or gzip) into a [`TensorDataset`].
use std::io::{BufRead, BufReader};
use std::path::Path;

use flate2::bufread::MultiGzDecoder;
use tch::Tensor;

use super::scaling::Scaling;
use super::tensor_dataset::TensorDataset;
use crate::error::{Error, ErrorCode, Result};

/// How [`load_csv`] reads a file.
#[derive(Debug, Clone, PartialEq)]
pub struct CsvOptions {
    /// Column of the integer labels; negative counts from the end (-1 is the
    /// last column); `None` = no labels.
    pub label_column: Option<i64>,
    /// Whether the first row is a header; `None` = detect (a header is a
    /// first row that is not all numeric).
    pub has_header: Option<bool>,
    /// Field separator, e.g. `b','`.
    pub delimiter: u8,
    /// Scaling of the feature columns.
    pub scaling: Scaling,
    /// Lines skipped before anything is read (a count line such as the
    /// first line of scikit-learn's CSVs).
    pub skip_rows: usize,
    /// The label column by its header name (instead of `label_column`).
    pub label_name: Option<String>,
    /// The feature columns, by header name or 0-based index, in this order;
    /// `None` = every column but the label.
    pub feature_columns: Option<Vec<String>>,
}

impl Default for CsvOptions {
    /// No labels, detect the header, comma-separated, no scaling.
    fn default() -> Self {
        CsvOptions {
            label_column: None,
            has_header: None,
            delimiter: b',',
            scaling: Scaling::None,
            skip_rows: 0,
            label_name: None,
            feature_columns: None,
        }
    }
}

/// Field texts that stand for a missing value.
const MISSING: &[&str] = &["", "na", "n/a", "nan", "null", "none", "?"];

const BUF_SIZE: usize = 1 << 16;

/// Loads a numeric CSV file, plain or gzip-compressed (recognised by its
/// magic bytes), into a dataset of features (f32 `[N, F]`) and, with a
/// `label_column` (or `label_name`), labels (i64 `[N]`). Fields are numbers
/// without quotes; blank lines are skipped; a UTF-8 byte-order mark is
/// ignored. A detected header whose field count differs from the data's is
/// a preamble, not column names. Errors name the file and the 1-based line
/// (and column: a missing value is named as such).
pub fn load_csv(path: &Path, opts: &CsvOptions) -> Result<TensorDataset> {
    opts.scaling.validate()?;
    let name = path.display().to_string();
    let file = crate::fs_safe::open_regular(path).map_err(|e| Error::io(format!("{name}: cannot open: {e}")))?;
    let mut raw = BufReader::with_capacity(BUF_SIZE, file);
    let head = raw.fill_buf().map_err(|e| Error::io(format!("{name}: cannot read: {e}")))?;
    let gzip = head.starts_with(&[0x1f, 0x8b]);
    let reader: Box<dyn BufRead> =
        if gzip { Box::new(BufReader::with_capacity(BUF_SIZE, MultiGzDecoder::new(raw))) } else { Box::new(raw) };
    let mut parser = Parser::new(&name, opts);
    parser.read_all(reader, gzip)?;
    parser.finish()
}

/// Parsing state: the expected column count, the resolved label column and
/// the values read so far.
struct Parser<'a> {
    name: &'a str,
    opts: &'a CsvOptions,
    /// Columns per row and the line that set it.
    shape: Option<(usize, usize)>,
    header_seen: bool,
    /// The header's names and its line, when there is one.
    header: Option<(Vec<String>, usize)>,
    label: Option<usize>,
    /// The feature columns read, in order (`None`: all but the label).
    selected: Option<Vec<usize>>,
    features: Vec<f32>,
    labels: Vec<i64>,
    rows: usize,
}

impl<'a> Parser<'a> {
    fn new(name: &'a str, opts: &'a CsvOptions) -> Self {
        Parser {
            name,
            opts,
            shape: None,
            header_seen: false,
            header: None,
            label: None,
            selected: None,
            features: Vec::new(),
            labels: Vec::new(),
            rows: 0,
        }
    }

    fn err(&self, code: ErrorCode, line: usize, msg: impl std::fmt::Display) -> Error {
        Error::new(code, format!("{}: line {line}: {msg}", self.name))
    }

    fn read_all(&mut self, mut reader: Box<dyn BufRead>, gzip: bool) -> Result<()> {
        let mut buf = Vec::with_capacity(BUF_SIZE);
        let mut line_no = 0usize;
        loop {
            buf.clear();
            let n = reader.read_until(b'\n', &mut buf).map_err(|e| {
                if gzip {
                    self.err(ErrorCode::Format, line_no + 1, format!("truncated or corrupt gzip stream: {e}"))
                } else {
                    self.err(ErrorCode::Io, line_no + 1, format!("read failed: {e}"))
                }
            })?;
            if n == 0 {
                return Ok(());
            }
            line_no += 1;
            if line_no <= self.opts.skip_rows {
                continue;
            }
            let mut line = trim(&buf);
            if line_no == self.opts.skip_rows + 1 {
                line = line.strip_prefix(b"\xEF\xBB\xBF".as_slice()).unwrap_or(line);
            }
            if line.is_empty() {
                continue;
            }
            if self.shape.is_none() && !self.header_seen && self.is_header(line) {
                self.header_seen = true;
                let names =
                    line.split(|&b| b == self.opts.delimiter).map(|f| String::from_utf8_lossy(trim(f)).into_owned());
                self.header = Some((names.collect(), line_no));
                continue;
            }
            self.parse_row(line, line_no)?;
        }
    }

    /// Whether the first non-blank line is a header.
    fn is_header(&self, line: &[u8]) -> bool {
        match self.opts.has_header {
            Some(h) => h,
            None => !line.split(|&b| b == self.opts.delimiter).all(|f| parse_f32(f).is_some()),
        }
    }

    /// Fixes the column count (from the first data row; a header that was
    /// asked for must have as many fields) and resolves the label and
    /// feature columns against it.
    fn set_shape(&mut self, cols: usize, line_no: usize) -> Result<()> {
        // A detected first line of another width is a preamble (such as
        // scikit-learn's count line), not column names.
        let names = match &self.header {
            Some((names, _)) if names.len() == cols => Some(names.clone()),
            Some((names, at)) if self.opts.has_header == Some(true) => {
                return Err(self.err(
                    ErrorCode::Format,
                    line_no,
                    format!("{cols} fields, but the header on line {at} has {}", names.len()),
                ))
            }
            _ => None,
        };
        self.shape = Some((cols, line_no));
        let file = self.name;
        let err = |code: ErrorCode, msg: String| Error::new(code, format!("{file}: line {line_no}: {msg}"));
        let by_name = |what: &str, name: &str| -> Result<usize> {
            let names = names.as_ref().ok_or_else(|| {
                err(ErrorCode::InvalidArgument, format!("{what} {name:?} needs a header naming the columns"))
            })?;
            names.iter().position(|n| n == name).ok_or_else(|| {
                let known: Vec<&str> = names.iter().map(String::as_str).take(20).collect();
                err(ErrorCode::InvalidArgument, format!("no column named {name:?} (columns: {known:?})"))
            })
        };
        let opts = self.opts;
        if let Some(name) = &opts.label_name {
            self.label = Some(by_name("label_name", name)?);
        } else if let Some(l) = opts.label_column {
            let idx = if l < 0 { cols as i64 + l } else { l };
            if idx < 0 || idx >= cols as i64 {
                return Err(err(ErrorCode::OutOfRange, format!("label_column {l} is out of range for {cols} columns")));
            }
            self.label = Some(idx as usize);
        }
        if let Some(columns) = &opts.feature_columns {
            let mut picked = Vec::with_capacity(columns.len().min(cols));
            for c in columns {
                let idx = match c.parse::<usize>() {
                    Ok(i) if names.as_ref().is_none_or(|n| !n.contains(c)) => {
                        if i >= cols {
                            return Err(err(
                                ErrorCode::OutOfRange,
                                format!("feature column {i} is out of range for {cols} columns"),
                            ));
                        }
                        i
                    }
                    _ => by_name("feature column", c)?,
                };
                if Some(idx) == self.label || picked.contains(&idx) {
                    return Err(err(
                        ErrorCode::InvalidArgument,
                        format!("feature column {c:?} is the label or given twice"),
                    ));
                }
                picked.push(idx);
            }
            if picked.is_empty() {
                return Err(err(ErrorCode::InvalidArgument, "feature_columns names no column".into()));
            }
            self.selected = Some(picked);
        }
        Ok(())
    }

    fn parse_row(&mut self, line: &[u8], line_no: usize) -> Result<()> {
        let delim = self.opts.delimiter;
        let cols = count_fields(line, delim);
        match self.shape {
            None => {
                self.set_shape(cols, line_no)?;
                // Room for about 1024 rows up front, at most 1 Mi values:
                // the column count comes from the file, so more memory is
                // only taken as rows are actually read.
                let per_row = match &self.selected {
                    Some(s) => s.len(),
                    None => cols - usize::from(self.label.is_some()),
                };
                self.features.reserve(per_row.saturating_mul(1024).min(1 << 20));
            }
            Some((expected, from)) if expected != cols => {
                return Err(self.err(
                    ErrorCode::Format,
                    line_no,
                    format!("ragged row: {cols} fields, expected {expected} (as on line {from})"),
                ));
            }
            Some(_) => {}
        }
        let label = self.label.unwrap_or(usize::MAX);
        if let Some(selected) = &self.selected {
            let fields: Vec<&[u8]> = line.split(|&b| b == delim).collect();
            for &c in selected {
                match parse_f32(fields[c]) {
                    Some(v) => self.features.push(v),
                    None => return Err(self.field_err(line_no, c, fields[c], "a non-numeric field")),
                }
            }
            if label != usize::MAX {
                match parse_label(fields[label]) {
                    Some(v) => self.labels.push(v),
                    None => return Err(self.field_err(line_no, label, fields[label], "a non-integer label")),
                }
            }
            self.rows += 1;
            return Ok(());
        }
        for (c, field) in line.split(|&b| b == delim).enumerate() {
            if c == label {
                match parse_label(field) {
                    Some(v) => self.labels.push(v),
                    None => return Err(self.field_err(line_no, c, field, "a non-integer label")),
                }
            } else {
                match parse_f32(field) {
                    Some(v) => self.features.push(v),
                    None => return Err(self.field_err(line_no, c, field, "a non-numeric field")),
                }
            }
        }
        self.rows += 1;
        Ok(())
    }

    fn field_err(&self, line_no: usize, col: usize, field: &[u8], what: &str) -> Error {
        let text = String::from_utf8_lossy(trim(field));
        let text: String = text.chars().take(40).collect();
        let name = match &self.header {
            Some((names, _)) if self.shape.is_some_and(|(cols, _)| cols == names.len()) => {
                names.get(col).map(|n| format!(" ({n:?})")).unwrap_or_default()
            }
            _ => String::new(),
        };
        if MISSING.contains(&text.to_ascii_lowercase().as_str()) {
            return self.err(ErrorCode::Format, line_no, format!("column {}{name}: a missing value {text:?}", col + 1));
        }
        self.err(ErrorCode::Format, line_no, format!("column {}{name}: {what} {text:?}", col + 1))
    }

    fn finish(mut self) -> Result<TensorDataset> {
        if self.rows == 0 {
            let what = if self.header_seen { "a header but no data rows" } else { "an empty file" };
            return Err(Error::format(format!("{}: {what}", self.name)));
        }
        let n = self.rows;
        let f = self.features.len() / n;
        self.opts.scaling.apply(&mut self.features, f)?;
        let x = Tensor::f_from_slice(&self.features)?.f_view([n as i64, f as i64])?;
        let mut tensors = vec![x];
        if self.label.is_some() {
            tensors.push(Tensor::f_from_slice(&self.labels)?);
        }
        TensorDataset::new(tensors)
    }
}

/// Number of fields of a line.
fn count_fields(line: &[u8], delim: u8) -> usize {
    line.iter().filter(|&&b| b == delim).count() + 1
}

/// The bytes without leading and trailing ASCII whitespace (incl. `\r\n`).
fn trim(s: &[u8]) -> &[u8] {
    s.trim_ascii()
}

/// Splits an optional sign off ASCII digits: `(negative, digits)` when the
/// field is a plain integer of at most `max` digits.
fn plain_integer(s: &[u8], max: usize) -> Option<(bool, &[u8])> {
    let (neg, digits) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    (!digits.is_empty() && digits.len() <= max && digits.iter().all(u8::is_ascii_digit)).then_some((neg, digits))
}

fn digits_value(digits: &[u8]) -> u64 {
    digits.iter().fold(0u64, |v, &d| v * 10 + u64::from(d - b'0'))
}

/// A finite f32; integers of up to 9 digits skip the general parser.
fn parse_f32(field: &[u8]) -> Option<f32> {
    let s = trim(field);
    if let Some((neg, digits)) = plain_integer(s, 9) {
        let v = digits_value(digits) as f32;
        return Some(if neg { -v } else { v });
    }
    let v: f32 = std::str::from_utf8(s).ok()?.parse().ok()?;
    v.is_finite().then_some(v)
}

/// An integer label: plain digits, or a float with no fractional part ("3.0").
fn parse_label(field: &[u8]) -> Option<i64> {
    let s = trim(field);
    if let Some((neg, digits)) = plain_integer(s, 18) {
        let v = digits_value(digits) as i64;
        return Some(if neg { -v } else { v });
    }
    let v: f64 = std::str::from_utf8(s).ok()?.parse().ok()?;
    (v.is_finite() && v.fract() == 0.0 && v.abs() < 9.0e15).then_some(v as i64)
}

#[cfg(test)]
#[path = "csv_tests.rs"]
mod tests;
