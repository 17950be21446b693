//! MLflow's tracking REST API (`/api/2.0/mlflow/...`) and its artifact
//! proxy (`/api/2.0/mlflow-artifacts/artifacts/...`): the calls the
//! logger makes, each answer checked.
use super::http::{self, Body, Endpoint};
use crate::error::{Error, Result};
use crate::loggers::logger::now_ms;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

/// MLflow's limits on one `runs/log-batch` call.
const MAX_BATCH_METRICS: usize = 1000;
const MAX_BATCH_PARAMS: usize = 100;

/// A tracking server: where requests go and the headers that authenticate
/// them (from MLflow's own variables: `MLFLOW_TRACKING_TOKEN`, or
/// `MLFLOW_TRACKING_USERNAME` with `MLFLOW_TRACKING_PASSWORD`).
pub struct Tracking {
    endpoint: Endpoint,
    headers: Vec<(String, String)>,
    timeout: Duration,
}

/// A run's identity and where its artifacts go.
#[derive(Debug, Clone)]
pub struct RunInfo {
    /// The run id (Lightning's `version`).
    pub run_id: String,
    /// The experiment it belongs to.
    pub experiment_id: String,
    /// `mlflow-artifacts:/...`, `file:///...` or a path.
    pub artifact_uri: String,
}

/// An answer other than 2xx: the HTTP status and MLflow's `error_code`.
struct Refusal {
    status: u16,
    code: String,
    message: String,
}

impl Tracking {
    /// A client of the server at `uri` (`http://host:port[/path]`).
    pub fn new(uri: &str, timeout: Duration) -> Result<Tracking> {
        let endpoint = Endpoint::parse(uri)?;
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let mut headers = Vec::new();
        if let Some(token) = var("MLFLOW_TRACKING_TOKEN") {
            headers.push(("Authorization".to_string(), format!("Bearer {token}")));
        } else if let (Some(user), Some(pass)) = (var("MLFLOW_TRACKING_USERNAME"), var("MLFLOW_TRACKING_PASSWORD")) {
            headers.push((
                "Authorization".to_string(),
                format!("Basic {}", http::base64(format!("{user}:{pass}").as_bytes())),
            ));
        }
        if headers.iter().any(|(_, v)| v.contains(['\r', '\n'])) {
            return Err(Error::invalid("MLFLOW_TRACKING_TOKEN / USERNAME / PASSWORD hold a line break"));
        }
        Ok(Tracking { endpoint, headers, timeout })
    }

    /// The server's URL, for messages.
    pub fn url(&self) -> String {
        self.endpoint.url()
    }

    /// Sends a request; `Ok(Err(..))` for a refusal the caller may expect.
    fn request(&self, method: &str, path: &str, body: Body) -> Result<std::result::Result<Value, Refusal>> {
        let r = http::send(&self.endpoint, method, path, &self.headers, body, self.timeout)?;
        let value: Value = if r.body.is_empty() {
            Value::Null
        } else {
            match serde_json::from_slice(&r.body) {
                Ok(v) => v,
                Err(_) if r.status >= 400 => json!({"message": String::from_utf8_lossy(&r.body).trim()}),
                Err(e) => return Err(Error::io(format!("MLflow {}{path}: the answer is not JSON: {e}", self.url()))),
            }
        };
        if (200..300).contains(&r.status) {
            return Ok(Ok(value));
        }
        let text = |k: &str| value.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        Ok(Err(Refusal { status: r.status, code: text("error_code"), message: text("message") }))
    }

    /// A tracking API call that must succeed.
    fn call(&self, method: &str, api: &str, body: Option<&Value>) -> Result<Value> {
        let path = format!("/api/2.0/mlflow/{api}");
        let text = body.map(|b| b.to_string());
        let body = text.as_deref().map_or(Body::Empty, |t| Body::Json(t.as_bytes()));
        self.request(method, &path, body)?.map_err(|r| self.refused(api, r))
    }

    fn refused(&self, api: &str, r: Refusal) -> Error {
        Error::io(format!("MLflow {} {api}: HTTP {} {}: {}", self.url(), r.status, r.code, r.message))
    }

    /// The experiment named `name`: its id and whether it is deleted;
    /// `None` when there is none.
    pub fn experiment_by_name(&self, name: &str) -> Result<Option<(String, bool)>> {
        let api = format!("experiments/get-by-name?experiment_name={}", http::encode(name, false));
        match self.request("GET", &format!("/api/2.0/mlflow/{api}"), Body::Empty)? {
            Ok(v) => {
                let e = &v["experiment"];
                let id = e["experiment_id"].as_str().ok_or_else(|| self.malformed("experiments/get-by-name"))?;
                Ok(Some((id.to_string(), e["lifecycle_stage"].as_str() == Some("deleted"))))
            }
            Err(r) if r.status == 404 || r.code == "RESOURCE_DOES_NOT_EXIST" => Ok(None),
            Err(r) => Err(self.refused("experiments/get-by-name", r)),
        }
    }

    /// Creates an experiment; `None` when another client created one of
    /// that name meanwhile.
    pub fn create_experiment(&self, name: &str, artifact_location: Option<&str>) -> Result<Option<String>> {
        let mut body = json!({ "name": name });
        if let Some(a) = artifact_location {
            body["artifact_location"] = json!(a);
        }
        let text = body.to_string();
        match self.request("POST", "/api/2.0/mlflow/experiments/create", Body::Json(text.as_bytes()))? {
            Ok(v) => {
                Ok(Some(v["experiment_id"].as_str().ok_or_else(|| self.malformed("experiments/create"))?.to_string()))
            }
            Err(r) if r.code == "RESOURCE_ALREADY_EXISTS" => Ok(None),
            Err(r) => Err(self.refused("experiments/create", r)),
        }
    }

    fn malformed(&self, api: &str) -> Error {
        Error::io(format!("MLflow {} {api}: the answer lacks the expected fields", self.url()))
    }

    fn run_info(&self, api: &str, v: &Value) -> Result<RunInfo> {
        let info = &v["run"]["info"];
        let field = |k: &str| info[k].as_str().map(str::to_string).ok_or_else(|| self.malformed(api));
        Ok(RunInfo {
            run_id: field("run_id")?,
            experiment_id: field("experiment_id")?,
            artifact_uri: field("artifact_uri")?,
        })
    }

    /// Starts a run in `experiment_id` with `tags` (`mlflow.runName` among
    /// them names it).
    pub fn create_run(
        &self,
        experiment_id: &str,
        run_name: Option<&str>,
        tags: &[(String, String)],
    ) -> Result<RunInfo> {
        let tags: Vec<Value> = tags.iter().map(|(k, v)| json!({"key": k, "value": v})).collect();
        let mut body = json!({ "experiment_id": experiment_id, "start_time": now_ms(), "tags": tags });
        if let Some(n) = run_name {
            body["run_name"] = json!(n);
        }
        let v = self.call("POST", "runs/create", Some(&body))?;
        self.run_info("runs/create", &v)
    }

    /// An existing run (Lightning's `run_id`): its info and status.
    pub fn get_run(&self, run_id: &str) -> Result<(RunInfo, String)> {
        let v = self.call("GET", &format!("runs/get?run_id={}", http::encode(run_id, false)), None)?;
        let status = v["run"]["info"]["status"].as_str().unwrap_or("").to_string();
        Ok((self.run_info("runs/get", &v)?, status))
    }

    /// Logs metrics (name, value, step) with one timestamp, and params,
    /// in batches within MLflow's limits.
    pub fn log_batch(&self, run_id: &str, metrics: &[(String, f64, i64)], params: &[(String, String)]) -> Result<()> {
        let ts = now_ms();
        for chunk in metrics.chunks(MAX_BATCH_METRICS) {
            let m: Vec<Value> = chunk
                .iter()
                .map(|(k, v, step)| json!({"key": k, "value": json_number(*v), "timestamp": ts, "step": step}))
                .collect();
            self.call("POST", "runs/log-batch", Some(&json!({"run_id": run_id, "metrics": m})))?;
        }
        for chunk in params.chunks(MAX_BATCH_PARAMS) {
            let p: Vec<Value> = chunk.iter().map(|(k, v)| json!({"key": k, "value": v})).collect();
            self.call("POST", "runs/log-batch", Some(&json!({"run_id": run_id, "params": p})))?;
        }
        Ok(())
    }

    /// Ends a run with `status` (FINISHED, FAILED, KILLED) now.
    pub fn end_run(&self, run_id: &str, status: &str) -> Result<()> {
        let body = json!({"run_id": run_id, "status": status, "end_time": now_ms()});
        self.call("POST", "runs/update", Some(&body)).map(|_| ())
    }

    /// Uploads `file` to `artifact_uri`/`rel` (`rel`: '/'-separated, no
    /// `..`): through the server's artifact proxy for `mlflow-artifacts:`,
    /// copied for a local folder (`file://` or an absolute path).
    pub fn upload(&self, artifact_uri: &str, rel: &str, file: &Path) -> Result<()> {
        if let Some(p) = artifact_uri.strip_prefix("mlflow-artifacts:") {
            if p.starts_with("//") {
                return Err(Error::unsupported(format!(
                    "artifact URI {artifact_uri:?} names another host; fulmen uploads through the tracking server only"
                )));
            }
            let path = format!(
                "/api/2.0/mlflow-artifacts/artifacts/{}/{}",
                http::encode(p.trim_matches('/'), true),
                http::encode(rel, true)
            );
            return self
                .request("PUT", &path, Body::File(file))?
                .map(|_| ())
                .map_err(|r| self.refused("artifact upload", r));
        }
        let local = match artifact_uri.strip_prefix("file://") {
            Some(p) => percent_decode(p)?,
            None => artifact_uri.to_string(),
        };
        if !local.starts_with('/') {
            return Err(Error::unsupported(format!(
                "artifact URI {artifact_uri:?}: fulmen writes artifacts through `mlflow server`'s artifact proxy \
                 (mlflow-artifacts:) or into a local folder; other stores need MLflow's Python client"
            )));
        }
        let dest = Path::new(&local).join(rel);
        if let Some(dir) = dest.parent() {
            std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("{}: {e}", dir.display())))?;
        }
        std::fs::copy(file, &dest)
            .map_err(|e| Error::io(format!("copying {} to {}: {e}", file.display(), dest.display())))?;
        Ok(())
    }
}

/// A `file://` URI's path with its `%XX` escapes decoded.
fn percent_decode(s: &str) -> Result<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok());
            let b = hex.ok_or_else(|| Error::io(format!("artifact URI path {s:?}: a bad % escape")))?;
            out.push(b);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| Error::io(format!("artifact URI path {s:?} is not UTF-8 once decoded")))
}

/// A metric value as MLflow's Python client sends it: non-finite values as
/// the strings "NaN", "Infinity", "-Infinity".
fn json_number(v: f64) -> Value {
    if v.is_nan() {
        json!("NaN")
    } else if v.is_infinite() {
        json!(if v > 0.0 { "Infinity" } else { "-Infinity" })
    } else {
        json!(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_uris_decode_and_values_encode_as_mlflow_sends_them() {
        assert_eq!(percent_decode("/a%20b/c").unwrap(), "/a b/c");
        assert!(percent_decode("/a%2").is_err() && percent_decode("/a%zz").is_err());
        assert_eq!(json_number(f64::NAN), json!("NaN"));
        assert_eq!(json_number(f64::NEG_INFINITY), json!("-Infinity"));
        assert_eq!(json_number(0.5), json!(0.5));
    }

    #[test]
    fn a_local_artifact_folder_gets_a_copy() {
        let d = crate::test_dirs::TempDir::new("mlflow-local-artifacts");
        let src = d.join("a.ckpt");
        std::fs::write(&src, b"weights").unwrap();
        let t = Tracking::new("http://127.0.0.1:9", Duration::from_secs(1)).unwrap();
        let root = d.join("art root");
        let uri = format!("file://{}", http::encode(root.to_str().unwrap(), true));
        t.upload(&uri, "a/a.ckpt", &src).unwrap();
        assert_eq!(std::fs::read(root.join("a/a.ckpt")).unwrap(), b"weights");
        let e = t.upload("s3://bucket/x", "a.ckpt", &src).unwrap_err();
        assert_eq!(e.code, crate::error::ErrorCode::Unsupported);
    }
}
