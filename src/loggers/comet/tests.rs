use super::messages::{metric_value, param_value, truncated};
use super::CometLogger;
use crate::error::ErrorCode;
use crate::loggers::Logger;
use crate::test_dirs::TempDir;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The messages of the experiment's working folder, one value per line.
fn messages_in(work: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(work.join("messages.json")).unwrap();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// The only `<stem>.partial` folder in `dir`.
fn work_dir(dir: &Path) -> PathBuf {
    let found: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "partial"))
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    found[0].clone()
}

fn metrics(pairs: &[(&str, f64)]) -> BTreeMap<String, f64> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

#[test]
fn messages_follow_comet_ml() {
    let d = TempDir::new("comet-messages");
    let mut l = CometLogger::new(d.to_str().unwrap(), "proj").unwrap();
    l.set_name("run-a").unwrap();
    l.add_tag("t1").unwrap();
    l.add_tag("t1").unwrap();
    l.set_prefix("p").unwrap();
    let params: BTreeMap<String, String> = [("lr", "0.1"), ("opt", "adam"), ("flag", "true"), ("n", "3")]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    l.log_hyperparams(&params).unwrap();
    l.log_metrics(&metrics(&[("loss", 0.5), ("acc", f64::NAN)]), Some(0), 0).unwrap();
    l.log_metrics(&metrics(&[("loss", 0.25)]), Some(0), 1).unwrap();
    l.log_metrics(&metrics(&[("loss", f64::INFINITY), ("epoch", 1.0)]), None, 1).unwrap();
    l.log_hyperparams(&params).unwrap();
    l.save().unwrap();
    let work = work_dir(d.as_ref());
    let m = messages_in(&work);
    let kinds: Vec<&str> = m.iter().map(|v| v["type"].as_str().unwrap()).collect();
    let ids: Vec<u64> = m.iter().map(|v| v["payload"]["message_id"].as_u64().unwrap()).collect();
    assert_eq!(ids, (1..=m.len() as u64).collect::<Vec<_>>());
    // offline_experiment, Name, Created from; 4 parameters; curr_step 0,
    // curr_epoch 0, 2 metrics; curr_step 1, 1 metric; curr_epoch 1, 1
    // metric; the parameters again are not written.
    assert_eq!(kinds[..3], ["log_other"; 3]);
    assert_eq!(m[1]["payload"]["value"], "run-a");
    assert_eq!(m[2]["payload"]["value"], "fulmen");
    let params_logged: Vec<(&str, &Value)> = m[3..7]
        .iter()
        .map(|v| (v["payload"]["param"]["paramName"].as_str().unwrap(), &v["payload"]["param"]["paramValue"]))
        .collect();
    assert_eq!(params_logged[0], ("flag", &Value::Bool(true)));
    assert_eq!(params_logged[1].1, &serde_json::json!(0.1));
    assert_eq!(params_logged[2].1, &serde_json::json!(3));
    assert_eq!(params_logged[3].1, &serde_json::json!("adam"));
    assert!(m[3]["payload"]["param"]["step"].is_null());
    assert_eq!(m[3]["payload"]["param"]["source"], "manual");
    assert_eq!(m[7]["payload"]["param"]["paramName"], "curr_step");
    assert_eq!(m[7]["payload"]["param"]["source"], "auto-logged");
    assert_eq!(m[8]["payload"]["param"]["paramName"], "curr_epoch");
    let metric = |i: usize| &m[i]["payload"]["metric"];
    assert_eq!(metric(9)["metricName"], "p_acc");
    assert_eq!(metric(9)["metricValue"], "NaN");
    assert_eq!(metric(10)["metricName"], "p_loss");
    assert_eq!((metric(10)["step"].as_i64(), metric(10)["epoch"].as_i64()), (Some(0), Some(0)));
    assert_eq!(m[11]["payload"]["param"]["paramValue"], 1);
    assert_eq!(metric(12)["step"], 1);
    assert_eq!(m[13]["payload"]["param"]["paramName"], "curr_epoch");
    assert_eq!(metric(14)["metricValue"], "Infinity");
    assert_eq!(metric(14)["epoch"], 1);
    assert_eq!(m.len(), 15);
    let meta: Value = serde_json::from_str(&std::fs::read_to_string(work.join("experiment.json")).unwrap()).unwrap();
    assert_eq!(meta["tags"], serde_json::json!(["t1"]));
    assert_eq!(meta["project_name"], "proj");
    assert_eq!(meta["offline_id"].as_str().unwrap().len(), 32);

    let key = l.experiment_key().unwrap();
    let archive = l.end().unwrap();
    assert_eq!(l.end().unwrap(), archive);
    let name = archive.file_name().unwrap().to_str().unwrap().to_string();
    assert!(name.starts_with(&format!("{key}-")) && name.ends_with(".zip") && name.len() == key.len() + 11, "{name}");
    assert!(!work.exists());
    let bytes = std::fs::read(&archive).unwrap();
    assert!(bytes.windows(13).any(|w| w == b"messages.json"));
    assert!(bytes.windows(15).any(|w| w == b"experiment.json"));
    let e = l.log_metrics(&metrics(&[("x", 1.0)]), None, 2).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidState);
    assert_eq!(l.run_dir().unwrap(), d.join("proj").join(&key));
}

#[test]
fn settings_are_checked_and_fixed_at_the_start() {
    let d = TempDir::new("comet-settings");
    assert_eq!(CometLogger::new(d.to_str().unwrap(), "a/b").err().unwrap().code, ErrorCode::InvalidArgument);
    assert_eq!(CometLogger::new(d.to_str().unwrap(), "..").err().unwrap().code, ErrorCode::InvalidArgument);
    let mut l = CometLogger::new(d.to_str().unwrap(), "").unwrap();
    assert_eq!(l.set_experiment_key("short").unwrap_err().code, ErrorCode::InvalidArgument);
    assert_eq!(l.set_experiment_key(&"a-".repeat(20)).unwrap_err().code, ErrorCode::InvalidArgument);
    assert_eq!(l.set_mode("append").unwrap_err().code, ErrorCode::InvalidArgument);
    let key = "abcdef0123456789abcdef0123456789";
    l.set_experiment_key(key).unwrap();
    l.set_mode("create").unwrap();
    assert_eq!(l.experiment_key().unwrap(), key);
    assert_eq!(l.set_name("late").unwrap_err().code, ErrorCode::InvalidState);
    assert_eq!(l.archive_path().unwrap(), d.join(format!("{key}.zip")));
    assert_eq!(l.run_dir().unwrap(), d.join("None").join(key));
    drop(l);
    // Dropping the logger ended the experiment; the same key in "create"
    // mode would overwrite that archive and is refused.
    assert!(d.join(format!("{key}.zip")).is_file());
    let mut again = CometLogger::new(d.to_str().unwrap(), "").unwrap();
    again.set_experiment_key(key).unwrap();
    again.set_mode("create").unwrap();
    assert_eq!(again.experiment_key().unwrap_err().code, ErrorCode::Io);
    assert!(std::fs::read_dir(d.as_ref()).unwrap().count() == 1);
}

#[test]
fn values_as_comet_ml_types_them() {
    assert_eq!(metric_value(0.5), serde_json::json!(0.5));
    assert_eq!(metric_value(f64::NEG_INFINITY), "-Infinity");
    assert_eq!(param_value("1e-3"), "1e-3");
    assert_eq!(param_value("-2"), serde_json::json!(-2));
    assert_eq!(param_value("false"), Value::Bool(false));
    assert_eq!(truncated("abc", 100), "abc");
    let long = "é".repeat(120);
    let cut = truncated(&long, 100);
    assert_eq!(cut.chars().count(), 100);
    assert!(cut.ends_with(" [truncated]"));
}
