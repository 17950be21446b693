use super::*;
use crate::error::ErrorCode;
use std::io::Cursor;
use std::net::TcpListener;

#[test]
fn endpoints_parse_as_written() {
    let e = Endpoint::parse("http://127.0.0.1:5000").unwrap();
    assert_eq!((e.host.as_str(), e.port, e.base.as_str()), ("127.0.0.1", 5000, ""));
    let e = Endpoint::parse("http://tracking.local/mlflow/").unwrap();
    assert_eq!((e.host.as_str(), e.port, e.base.as_str()), ("tracking.local", 80, "/mlflow"));
    let e = Endpoint::parse("http://[::1]:8080/x").unwrap();
    assert_eq!((e.host.as_str(), e.port, e.url().as_str()), ("[::1]", 8080, "http://[::1]:8080/x"));
    assert_eq!(Endpoint::parse("https://h").unwrap_err().code, ErrorCode::Unsupported);
    for bad in ["file:./mlruns", "h:5000", "http://", "http://h:port", "http://u:p@h", "http://h/a?b", "http://h /"] {
        assert_eq!(Endpoint::parse(bad).unwrap_err().code, ErrorCode::InvalidArgument, "{bad}");
    }
}

#[test]
fn encoding_and_base64() {
    assert_eq!(encode("epoch=0-step=4.ckpt", true), "epoch%3D0-step%3D4.ckpt");
    assert_eq!(encode("a b/c", true), "a%20b/c");
    assert_eq!(encode("a b/c", false), "a%20b%2Fc");
    assert_eq!(base64(b"user:pass"), "dXNlcjpwYXNz");
    assert_eq!(base64(b"ab"), "YWI=");
    assert_eq!(base64(b"a"), "YQ==");
    assert_eq!(base64(b""), "");
}

#[test]
fn responses_by_length_chunks_or_close() {
    let r = read_response(Cursor::new(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}".to_vec())).unwrap();
    assert_eq!((r.status, r.body.as_slice()), (200, &b"{}"[..]));
    let chunked = b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=1\r\nde\r\n0\r\n\r\n";
    let r = read_response(Cursor::new(chunked.to_vec())).unwrap();
    assert_eq!((r.status, r.body.as_slice()), (404, &b"abcde"[..]));
    let r = read_response(Cursor::new(b"HTTP/1.0 500 X\r\n\r\nall of it".to_vec())).unwrap();
    assert_eq!((r.status, r.body.as_slice()), (500, &b"all of it"[..]));
}

#[test]
fn hostile_responses_are_errors_not_allocations() {
    let huge = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", u64::MAX);
    assert!(read_response(Cursor::new(huge.into_bytes())).unwrap_err().message.contains("exceeds"));
    let chunk = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffff\r\n".to_vec();
    assert!(read_response(Cursor::new(chunk)).unwrap_err().message.contains("exceeds"));
    // A size that would overflow the body's length once added to it.
    let wrap = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\nfffffffffffffffe\r\n".to_vec();
    assert!(read_response(Cursor::new(wrap)).unwrap_err().message.contains("exceeds"));
    // Many small chunks are a body, not headers.
    let mut many = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..20_000 {
        many.extend_from_slice(b"1\r\nx\r\n");
    }
    many.extend_from_slice(b"0\r\n\r\n");
    assert_eq!(read_response(Cursor::new(many)).unwrap().body.len(), 20_000);
    let short = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc".to_vec();
    assert!(read_response(Cursor::new(short)).unwrap_err().message.contains("before the body's end"));
    let endless_header = [b"HTTP/1.1 200 OK\r\nX: ".to_vec(), vec![b'a'; 70_000]].concat();
    assert!(read_response(Cursor::new(endless_header)).unwrap_err().message.contains("64 KiB"));
    assert!(read_response(Cursor::new(b"SSH-2.0\r\n\r\n".to_vec())).unwrap_err().message.contains("not an HTTP"));
    assert!(read_response(Cursor::new(Vec::new())).unwrap_err().message.contains("closed"));
}

#[test]
fn a_request_and_its_file_body_reach_the_server() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        let (s, _) = listener.accept().unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        let mut head = String::new();
        loop {
            let mut l = String::new();
            r.read_line(&mut l).unwrap();
            if l == "\r\n" {
                break;
            }
            head.push_str(&l);
        }
        let mut body = vec![0u8; 5];
        r.read_exact(&mut body).unwrap();
        (&s).write_all(b"HTTP/1.1 201 Created\r\nContent-Length: 4\r\n\r\ndone").unwrap();
        (head, body)
    });
    let dir = crate::test_dirs::TempDir::new("mlflow-http");
    let file = dir.join("blob.bin");
    std::fs::write(&file, b"hello").unwrap();
    let e = Endpoint::parse(&format!("http://127.0.0.1:{port}/base")).unwrap();
    let auth = vec![("Authorization".to_string(), "Bearer t".to_string())];
    let r = send(&e, "PUT", "/x/a%20b", &auth, Body::File(&file), Duration::from_secs(10)).unwrap();
    assert_eq!((r.status, r.body.as_slice()), (201, &b"done"[..]));
    let (head, body) = server.join().unwrap();
    assert!(head.starts_with("PUT /base/x/a%20b HTTP/1.1\r\n"), "{head}");
    assert!(head.contains("Content-Length: 5\r\n") && head.contains("Authorization: Bearer t\r\n"), "{head}");
    assert_eq!(body, b"hello");
}

#[test]
fn a_closed_port_and_a_silent_server_are_io_errors() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // Accepted by the backlog but never answered: the read times out.
    let e = Endpoint::parse(&format!("http://127.0.0.1:{port}")).unwrap();
    let err = send(&e, "GET", "/", &[], Body::Empty, Duration::from_millis(300)).unwrap_err();
    assert_eq!(err.code, ErrorCode::Io, "{}", err.message);
    drop(listener);
    let err = send(&e, "GET", "/", &[], Body::Empty, Duration::from_millis(300)).unwrap_err();
    assert!(err.message.contains("cannot connect"), "{}", err.message);
}
