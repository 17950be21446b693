use super::*;
use crate::test_dirs::TempDir;
use std::collections::HashMap;

/// Metadata answered from a map.
struct Fixed(HashMap<&'static str, &'static str>);

impl Metadata for Fixed {
    fn get(&self, key: &str) -> Result<String> {
        self.0.get(key).map(|s| s.to_string()).ok_or_else(|| Error::io(format!("no {key}")))
    }
}

fn no_metadata() -> Fixed {
    Fixed(HashMap::new())
}

fn vars(pairs: &[(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    move |k| map.get(k).cloned()
}

#[test]
fn chips_are_counted_from_pci() {
    let dir = TempDir::new("tpu-pci");
    let add = |name: &str, vendor: &str, device: &str| {
        let d = dir.join(name);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("vendor"), format!("{vendor}\n")).unwrap();
        std::fs::write(d.join("device"), format!("{device}\n")).unwrap();
    };
    add("0000:00:04.0", "0x1ae0", "0x005e");
    add("0000:00:05.0", "0x1ae0", "0x005e");
    add("0000:00:06.0", "0x1ae0", "0x0042"); // Google, not a TPU
    add("0000:00:07.0", "0x10de", "0x005e"); // another vendor
    std::fs::create_dir_all(dir.join("0000:00:08.0")).unwrap(); // no files
    assert_eq!(num_available_chips(&dir), 2);
    assert_eq!(num_available_chips(&dir.join("absent")), 0);
}

#[test]
fn versions_and_cores_follow_torch_xla() {
    assert_eq!(version("v4-8").unwrap(), 4);
    assert_eq!(version("v5litepod-16").unwrap(), 5);
    assert_eq!(version("v6e-8").unwrap(), 6);
    assert_eq!(version("v3-2048").unwrap(), 3);
    for bad in ["4-8", "v-8", "vX-8", "v4", "v5litepodxx-8", "v4-x"] {
        assert!(version(bad).is_err(), "{bad}");
    }
    assert_eq!((logical_cores_per_chip(3), logical_cores_per_chip(4)), (2, 1));
    assert!(MeshShape::parse("2,2").is_err() && MeshShape::parse("2,0,1").is_err());
}

#[test]
fn a_v4_host_gives_each_process_one_chip() {
    // tpu-env of a v4-8 as the metadata server writes it.
    let meta = Fixed(HashMap::from([
        ("tpu-env", "ACCELERATOR_TYPE: 'v4-8'\nTPU_PROCESS_BOUNDS: '1,1,1'\nTPU_CHIPS_PER_PROCESS_BOUNDS: '2,2,1'\nWORKER_ID: '0'\n"),
        ("worker-network-endpoints", "t1v-n-0:1:10.130.0.2"),
    ]));
    let env = tpu_env(&vars(&[]), &meta).unwrap();
    assert_eq!(env.worker_hosts, ["localhost"]);
    let got = topology_vars(&env, 2, 4).unwrap();
    let want = [
        ("TPU_CHIPS_PER_PROCESS_BOUNDS", "1,1,1"),
        ("TPU_PROCESS_BOUNDS", "2,2,1"),
        ("CLOUD_TPU_TASK_ID", "2"),
        ("TPU_PROCESS_ADDRESSES", "localhost:8476,localhost:8477,localhost:8478,localhost:8479"),
        ("TPU_VISIBLE_CHIPS", "2"),
        ("TPU_PROCESS_PORT", "8478"),
    ];
    assert_eq!(got.iter().map(|(k, v)| (*k, v.as_str())).collect::<Vec<_>>(), want);
    assert!(topology_vars(&env, 4, 4).is_err());
}

#[test]
fn a_multi_host_slice_from_variables() {
    let v = vars(&[
        ("TPU_SKIP_MDS_QUERY", "1"),
        ("TPU_ACCELERATOR_TYPE", "v4-16"),
        ("TPU_HOST_BOUNDS", "1,1,2"),
        ("TPU_CHIPS_PER_HOST_BOUNDS", "2,2,1"),
        ("TPU_WORKER_ID", "1"),
        ("TPU_WORKER_HOSTNAMES", "host-a,host-b"),
    ]);
    let env = tpu_env(&v, &no_metadata()).unwrap();
    let got: HashMap<_, _> = topology_vars(&env, 3, 4).unwrap().into_iter().collect();
    assert_eq!(got["TPU_PROCESS_BOUNDS"], "2,2,2");
    assert_eq!(got["CLOUD_TPU_TASK_ID"], "7");
    assert_eq!(
        got["TPU_PROCESS_ADDRESSES"],
        "host-a:8476,host-a:8477,host-a:8478,host-a:8479,host-b:8476,host-b:8477,host-b:8478,host-b:8479"
    );
    assert_eq!((got["TPU_VISIBLE_CHIPS"].as_str(), got["TPU_PROCESS_PORT"].as_str()), ("3", "8479"));
}

#[test]
fn a_v3_slice_takes_its_bounds_from_the_table() {
    let v = vars(&[("TPU_SKIP_MDS_QUERY", "1"), ("TPU_ACCELERATOR_TYPE", "v3-32"), ("TPU_WORKER_ID", "0")]);
    let env = tpu_env(&v, &no_metadata()).unwrap();
    let got: HashMap<_, _> = topology_vars(&env, 0, 4).unwrap().into_iter().collect();
    assert_eq!(got["TPU_PROCESS_BOUNDS"], "4,4,1");
    let v = vars(&[("TPU_SKIP_MDS_QUERY", "1"), ("TPU_ACCELERATOR_TYPE", "v3-4096"), ("TPU_WORKER_ID", "0")]);
    assert!(topology_vars(&tpu_env(&v, &no_metadata()).unwrap(), 0, 1).is_err());
}

#[test]
fn missing_or_bad_metadata_is_a_clear_error() {
    assert!(tpu_env(&vars(&[]), &no_metadata()).unwrap_err().message.contains("tpu-env"));
    let v = vars(&[("TPU_SKIP_MDS_QUERY", "1")]);
    assert!(tpu_env(&v, &no_metadata()).unwrap_err().message.contains("accelerator type"));
    let v = vars(&[("TPU_SKIP_MDS_QUERY", "1"), ("TPU_ACCELERATOR_TYPE", "v4-8"), ("TPU_WORKER_ID", "x")]);
    assert!(tpu_env(&v, &no_metadata()).is_err());
    let v = vars(&[("TPU_SKIP_MDS_QUERY", "1"), ("TPU_ACCELERATOR_TYPE", "v4-8")]);
    assert!(tpu_env(&v, &no_metadata()).unwrap_err().message.contains("worker id"));
    let v = vars(&[("TPU_SKIP_MDS_QUERY", "1"), ("TPU_ACCELERATOR_TYPE", "v4-8"), ("CLOUD_TPU_TASK_ID", "0")]);
    let e = topology_vars(&tpu_env(&v, &no_metadata()).unwrap(), 0, 1).unwrap_err();
    assert!(e.message.contains("TPU_PROCESS_BOUNDS"), "{e}");
    let meta = Fixed(HashMap::from([("tpu-env", "ACCELERATOR_TYPE: 'v4-8'"), ("worker-network-endpoints", "a:b")]));
    assert!(tpu_env(&vars(&[]), &meta).unwrap_err().message.contains("host:uid:ip"));
}

#[test]
fn the_metadata_server_is_asked_with_googles_header() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        use std::io::{BufRead, BufReader, Write};
        let (stream, _) = listener.accept().unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut head = String::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
                break;
            }
            head.push_str(&line);
        }
        let body = "ACCELERATOR_TYPE: 'v4-8'";
        write!(&stream, "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len())
            .unwrap();
        head
    });
    let got = MetadataServer { url: format!("http://127.0.0.1:{port}") }.get("tpu-env").unwrap();
    let head = server.join().unwrap();
    assert_eq!(got, "ACCELERATOR_TYPE: 'v4-8'");
    assert!(head.starts_with("GET /computeMetadata/v1/instance/attributes/tpu-env "), "{head}");
    assert!(head.to_ascii_lowercase().contains("metadata-flavor: google"), "{head}");
}
