//! Loading a numeric CSV file (plain or gzip) into a [`TensorDataset`].
use std::fs::File;
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
}

impl Default for CsvOptions {
    /// No labels, detect the header, comma-separated, no scaling.
    fn default() -> Self {
        CsvOptions { label_column: None, has_header: None, delimiter: b',', scaling: Scaling::None }
    }
}

const BUF_SIZE: usize = 1 << 16;

/// Loads a numeric CSV file, plain or gzip-compressed (recognised by its
/// magic bytes), into a dataset of features (f32 `[N, F]`) and, with a
/// `label_column`, labels (i64 `[N]`). Fields are numbers without quotes;
/// blank lines are skipped; a UTF-8 byte-order mark is ignored. Errors name
/// the file and the 1-based line.
pub fn load_csv(path: &Path, opts: &CsvOptions) -> Result<TensorDataset> {
    opts.scaling.validate()?;
    let name = path.display().to_string();
    let file = File::open(path).map_err(|e| Error::io(format!("{name}: cannot open: {e}")))?;
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
    label: Option<usize>,
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
            label: None,
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
            let mut line = trim(&buf);
            if line_no == 1 {
                line = line.strip_prefix(b"\xEF\xBB\xBF".as_slice()).unwrap_or(line);
            }
            if line.is_empty() {
                continue;
            }
            if self.shape.is_none() && !self.header_seen && self.is_header(line) {
                self.header_seen = true;
                self.set_shape(count_fields(line, self.opts.delimiter), line_no)?;
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

    /// Fixes the column count (from the header or the first data row) and
    /// resolves the label column against it.
    fn set_shape(&mut self, cols: usize, line_no: usize) -> Result<()> {
        self.shape = Some((cols, line_no));
        if let Some(l) = self.opts.label_column {
            let idx = if l < 0 { cols as i64 + l } else { l };
            if idx < 0 || idx >= cols as i64 {
                return Err(self.err(
                    ErrorCode::OutOfRange,
                    line_no,
                    format!("label_column {l} is out of range for {cols} columns"),
                ));
            }
            self.label = Some(idx as usize);
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
                let per_row = cols - usize::from(self.label.is_some());
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
        self.err(ErrorCode::Format, line_no, format!("column {}: {what} {text:?}", col + 1))
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
