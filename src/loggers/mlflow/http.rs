//! A small HTTP/1.1 client for MLflow's REST API: one connection per
//! request (`Connection: close`), bounded in time (connect, read and write
//! timeouts) and in memory (a response larger than [`MAX_RESPONSE`] is
//! refused, whatever its headers claim). Plain `http://` only: TLS is not
//! built in.
use crate::error::{Error, Result};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// The most bytes of a response body read (MLflow's JSON answers are small).
pub(crate) const MAX_RESPONSE: usize = 16 << 20;
/// The most bytes of a status line and headers.
const MAX_HEAD: usize = 64 << 10;

/// Where requests go: `http://host[:port][/base]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Host name or address, as written (brackets kept for IPv6).
    pub host: String,
    /// TCP port (80 when not written).
    pub port: u16,
    /// Path before every request's path, without a trailing '/'.
    pub base: String,
}

impl Endpoint {
    /// Parses a tracking URI. `https://` is `Unsupported` (no TLS built
    /// in); other schemes are `InvalidArgument`.
    pub fn parse(uri: &str) -> Result<Endpoint> {
        let rest = match uri.split_once("://") {
            Some(("http", rest)) => rest,
            Some(("https", _)) => {
                return Err(Error::unsupported(format!(
                    "tracking URI {uri:?}: fulmen's MLflow client speaks plain http:// (no TLS built in); reach an \
                     https server through a local TLS proxy"
                )))
            }
            _ => {
                return Err(Error::invalid(format!(
                    "tracking URI {uri:?}: expected http://host[:port][/path] (MLflow's file: and database stores \
                     are read by its Python client only; point fulmen at an `mlflow server`)"
                )))
            }
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if authority.contains('@') {
            return Err(Error::invalid(format!(
                "tracking URI {uri:?}: credentials in the URI are not read; set MLFLOW_TRACKING_USERNAME / \
                 MLFLOW_TRACKING_PASSWORD or MLFLOW_TRACKING_TOKEN"
            )));
        }
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !p.contains(']') => {
                let port = p.parse::<u16>().map_err(|_| Error::invalid(format!("tracking URI {uri:?}: bad port")))?;
                (h, port)
            }
            _ => (authority, 80),
        };
        if host.is_empty() || path.contains(['?', '#']) || uri.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(Error::invalid(format!("tracking URI {uri:?}: expected http://host[:port][/path]")));
        }
        Ok(Endpoint { host: host.to_string(), port, base: path.trim_end_matches('/').to_string() })
    }

    /// `http://host:port/base`, for messages and to resolve artifact URIs.
    pub fn url(&self) -> String {
        format!("http://{}:{}{}", self.host, self.port, self.base)
    }
}

/// A request body: bytes in memory, or a file streamed from disk.
pub enum Body<'a> {
    /// No body.
    Empty,
    /// JSON text.
    Json(&'a [u8]),
    /// A file's bytes (`application/octet-stream`).
    File(&'a std::path::Path),
}

/// A response: status code and body.
#[derive(Debug)]
pub struct Response {
    /// HTTP status.
    pub status: u16,
    /// The body (at most [`MAX_RESPONSE`] bytes).
    pub body: Vec<u8>,
}

/// Percent-encodes `s` for a URL path (keeps `/`) or a query value.
pub fn encode(s: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        let plain = b.is_ascii_alphanumeric() || b"-._~".contains(&b) || (keep_slash && b == b'/');
        if plain {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Sends `method path_and_query` to `endpoint` with `headers` (name,
/// value) and `body`; waits at most `timeout` for the connection and for
/// each read or write.
pub fn send(
    endpoint: &Endpoint,
    method: &str,
    path_and_query: &str,
    headers: &[(String, String)],
    body: Body,
    timeout: Duration,
) -> Result<Response> {
    let what = || format!("{method} {}{path_and_query}", endpoint.url());
    let host = endpoint.host.trim_start_matches('[').trim_end_matches(']');
    let addrs = (host, endpoint.port).to_socket_addrs().map_err(|e| Error::io(format!("{}: {e}", what())))?;
    let mut last = None;
    let mut stream = None;
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = Some(e),
        }
    }
    let mut stream = stream.ok_or_else(|| {
        Error::io(format!("{}: cannot connect: {}", what(), last.map_or("no address".to_string(), |e| e.to_string())))
    })?;
    stream.set_read_timeout(Some(timeout)).and_then(|_| stream.set_write_timeout(Some(timeout))).map_err(io(&what))?;
    let (content_type, length) = match &body {
        Body::Empty => (None, 0u64),
        Body::Json(b) => (Some("application/json"), b.len() as u64),
        Body::File(p) => (Some("application/octet-stream"), std::fs::metadata(p).map_err(io(&what))?.len()),
    };
    let mut head = format!(
        "{method} {}{path_and_query} HTTP/1.1\r\nHost: {}:{}\r\nConnection: close\r\nUser-Agent: fulmen\r\n\
         Accept: application/json\r\nContent-Length: {length}\r\n",
        endpoint.base, endpoint.host, endpoint.port
    );
    if let Some(t) = content_type {
        head.push_str(&format!("Content-Type: {t}\r\n"));
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).map_err(io(&what))?;
    match body {
        Body::Empty => {}
        Body::Json(b) => stream.write_all(b).map_err(io(&what))?,
        Body::File(p) => {
            let mut f = std::fs::File::open(p).map_err(io(&what))?;
            let copied = std::io::copy(&mut (&mut f).take(length), &mut stream).map_err(io(&what))?;
            if copied != length {
                return Err(Error::io(format!("{}: {} changed while it was sent", what(), p.display())));
            }
        }
    }
    stream.flush().map_err(io(&what))?;
    read_response(BufReader::new(stream)).map_err(|e| Error::new(e.code, format!("{}: {}", what(), e.message)))
}

fn io<'a>(what: &'a dyn Fn() -> String) -> impl Fn(std::io::Error) -> Error + 'a {
    move |e| Error::io(format!("{}: {e}", what()))
}

/// Reads one line of at most `limit` bytes (without its CRLF); a longer
/// one is the error `too_long`.
fn read_line(r: &mut dyn BufRead, limit: usize, too_long: &str) -> Result<(String, usize)> {
    let mut buf = Vec::new();
    let n = r
        .take(limit as u64 + 1)
        .read_until(b'\n', &mut buf)
        .map_err(|e| Error::io(format!("reading the response: {e}")))?;
    if n > limit {
        return Err(Error::io(too_long));
    }
    if n == 0 {
        return Err(Error::io("the server closed the connection without a complete response"));
    }
    Ok((String::from_utf8_lossy(&buf).trim_end_matches(['\r', '\n']).to_string(), n))
}

/// Reads a status line, headers and a body (by Content-Length, chunked,
/// or to the end), refusing more than the bounds.
pub fn read_response(mut r: impl BufRead) -> Result<Response> {
    let mut head_left = MAX_HEAD;
    let mut head_line = |r: &mut dyn BufRead| -> Result<String> {
        let (line, n) = read_line(r, head_left, "the response's headers exceed 64 KiB")?;
        head_left -= n.min(head_left);
        Ok(line)
    };
    let status_line = head_line(&mut r)?;
    let status = status_line
        .split_whitespace()
        .nth(1)
        .filter(|_| status_line.starts_with("HTTP/1."))
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| Error::io(format!("not an HTTP response: {status_line:?}")))?;
    let (mut length, mut chunked) = (None, false);
    loop {
        let h = head_line(&mut r)?;
        if h.is_empty() {
            break;
        }
        let Some((k, v)) = h.split_once(':') else { continue };
        let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
        if k == "content-length" {
            length = Some(v.parse::<u64>().map_err(|_| Error::io(format!("bad Content-Length {v:?}")))?);
        } else if k == "transfer-encoding" && v.to_ascii_lowercase().contains("chunked") {
            chunked = true;
        }
    }
    let too_big = || Error::io(format!("the response's body exceeds {} MiB", MAX_RESPONSE >> 20));
    let mut body = Vec::new();
    if chunked {
        // A chunk's size line and the CRLF after it: short lines, each
        // bounded on its own.
        const CHUNK_LINE: usize = 4 << 10;
        loop {
            let (size_line, _) = read_line(&mut r, CHUNK_LINE, "a chunk's size line exceeds 4 KiB")?;
            let hex = size_line.split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(hex, 16).map_err(|_| Error::io(format!("bad chunk size {hex:?}")))?;
            if size == 0 {
                break;
            }
            if size > MAX_RESPONSE - body.len() {
                return Err(too_big());
            }
            let start = body.len();
            body.resize(start + size, 0);
            r.read_exact(&mut body[start..]).map_err(|e| Error::io(format!("reading a chunk: {e}")))?;
            read_line(&mut r, CHUNK_LINE, "a chunk's end line exceeds 4 KiB")?;
        }
    } else if let Some(n) = length {
        if n > MAX_RESPONSE as u64 {
            return Err(too_big());
        }
        r.take(n).read_to_end(&mut body).map_err(|e| Error::io(format!("reading the body: {e}")))?;
        if body.len() as u64 != n {
            return Err(Error::io("the server closed the connection before the body's end"));
        }
    } else {
        r.take(MAX_RESPONSE as u64 + 1).read_to_end(&mut body).map_err(|e| Error::io(format!("reading: {e}")))?;
        if body.len() > MAX_RESPONSE {
            return Err(too_big());
        }
    }
    Ok(Response { status, body })
}

/// Base64 (RFC 4648, padded), for HTTP basic authentication.
pub fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for c in bytes.chunks(3) {
        let n =
            (u32::from(c[0]) << 16) | (u32::from(*c.get(1).unwrap_or(&0)) << 8) | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
#[path = "http_tests.rs"]
mod tests;
