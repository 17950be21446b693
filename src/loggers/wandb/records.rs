//! The `wandb_internal.Record` messages a run's `.wandb` file holds, as
//! far as fulmen writes them (field numbers of `wandb_internal.proto`):
//! the header, the run, metric definitions, config, history, summary and
//! exit records. Hand-written proto3 encoding; empty strings and zero
//! numbers are left out, as protobuf's own encoders leave them.
use crate::loggers::tensorboard::proto::{put_bytes, put_int, put_message, put_str_opt, Message};

/// One `key` / `value_json` pair of a config, history or summary record.
pub type Item = (String, String);

/// What a record holds (the `record_type` oneof).
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    /// `header` (21): the writer's version and the oldest reader's.
    Header {
        /// `version_info.producer`.
        producer: String,
        /// `version_info.min_consumer`.
        min_consumer: String,
    },
    /// `run` (17): the run's identity and settings.
    Run(RunInfo),
    /// `metric` (12): `define_metric` of a name or a glob.
    Metric(MetricDef),
    /// `config` (5): config keys set.
    Config(Vec<Item>),
    /// `history` (2): one logged row and its `_step`.
    History {
        /// The row's values.
        items: Vec<Item>,
        /// `step.num`.
        step: i64,
    },
    /// `summary` (3): the run summary's keys updated.
    Summary(Vec<Item>),
    /// `exit` (18): the run ended.
    Exit {
        /// `exit_code`: 0 for a run that finished, else non-zero.
        code: i32,
        /// `runtime`: whole seconds the run lasted.
        runtime: i32,
    },
}

/// A run record's fields.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RunInfo {
    /// `run_id` (1).
    pub run_id: String,
    /// `entity` (2).
    pub entity: String,
    /// `project` (3).
    pub project: String,
    /// `run_group` (6).
    pub group: String,
    /// `job_type` (7).
    pub job_type: String,
    /// `display_name` (8).
    pub display_name: String,
    /// `notes` (9).
    pub notes: String,
    /// `tags` (10).
    pub tags: Vec<String>,
    /// `host` (13).
    pub host: String,
    /// `start_time` (17): seconds and nanoseconds since the Unix epoch.
    pub start_time: (i64, i32),
}

/// A metric record's fields.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MetricDef {
    /// `name` (1), or empty for a glob.
    pub name: String,
    /// `glob_name` (2).
    pub glob_name: String,
    /// `step_metric` (4).
    pub step_metric: String,
    /// `options.step_sync` (6.1).
    pub step_sync: bool,
}

/// One record: its sequence number, its body, and the run it belongs to
/// (`_info.stream_id`).
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// `num` (1), counting from 1.
    pub num: i64,
    /// The body.
    pub body: Body,
    /// `_info.stream_id` (200.1): the run's id.
    pub stream_id: String,
}

/// A message given as a closure over its buffer.
struct Raw<F: Fn(&mut Vec<u8>)>(F);

impl<F: Fn(&mut Vec<u8>)> Message for Raw<F> {
    fn encode_to(&self, buf: &mut Vec<u8>) {
        (self.0)(buf)
    }
}

/// Appends `items` as repeated field 1 of `{key (1) or nested_key (2),
/// value_json (16)}` messages (config items use `key`; history and
/// summary items `nested_key`, as wandb's writer puts them).
fn put_items(buf: &mut Vec<u8>, items: &[Item], key_field: u32) {
    for (key, value) in items {
        put_message(
            buf,
            1,
            &Raw(|b: &mut Vec<u8>| {
                put_bytes(b, key_field, key.as_bytes());
                put_bytes(b, 16, value.as_bytes());
            }),
        );
    }
}

impl Message for RunInfo {
    fn encode_to(&self, buf: &mut Vec<u8>) {
        put_str_opt(buf, 1, &self.run_id);
        put_str_opt(buf, 2, &self.entity);
        put_str_opt(buf, 3, &self.project);
        // The config every run record carries, as wandb's writer sets it.
        put_message(buf, 4, &Raw(|b: &mut Vec<u8>| put_items(b, &[("_wandb".into(), "{}".into())], 1)));
        put_str_opt(buf, 6, &self.group);
        put_str_opt(buf, 7, &self.job_type);
        put_str_opt(buf, 8, &self.display_name);
        put_str_opt(buf, 9, &self.notes);
        for tag in &self.tags {
            put_bytes(buf, 10, tag.as_bytes());
        }
        put_str_opt(buf, 13, &self.host);
        let (secs, nanos) = self.start_time;
        put_message(
            buf,
            17,
            &Raw(|b: &mut Vec<u8>| {
                if secs != 0 {
                    put_int(b, 1, secs);
                }
                if nanos != 0 {
                    put_int(b, 2, i64::from(nanos));
                }
            }),
        );
    }
}

impl Message for MetricDef {
    fn encode_to(&self, buf: &mut Vec<u8>) {
        put_str_opt(buf, 1, &self.name);
        put_str_opt(buf, 2, &self.glob_name);
        put_str_opt(buf, 4, &self.step_metric);
        put_message(
            buf,
            6,
            &Raw(|b: &mut Vec<u8>| {
                if self.step_sync {
                    put_int(b, 1, 1);
                }
                put_int(b, 3, 1);
            }),
        );
    }
}

impl Message for Record {
    fn encode_to(&self, buf: &mut Vec<u8>) {
        if self.num != 0 {
            put_int(buf, 1, self.num);
        }
        match &self.body {
            Body::History { items, step } => put_message(
                buf,
                2,
                &Raw(|b: &mut Vec<u8>| {
                    put_items(b, items, 2);
                    put_message(
                        b,
                        2,
                        &Raw(|s: &mut Vec<u8>| {
                            if *step != 0 {
                                put_int(s, 1, *step)
                            }
                        }),
                    );
                }),
            ),
            Body::Summary(items) => put_message(buf, 3, &Raw(|b: &mut Vec<u8>| put_items(b, items, 2))),
            Body::Config(items) => put_message(buf, 5, &Raw(|b: &mut Vec<u8>| put_items(b, items, 1))),
            Body::Metric(def) => put_message(buf, 12, def),
            Body::Run(run) => put_message(buf, 17, run),
            Body::Exit { code, runtime } => put_message(
                buf,
                18,
                &Raw(|b: &mut Vec<u8>| {
                    if *code != 0 {
                        put_int(b, 1, i64::from(*code));
                    }
                    if *runtime != 0 {
                        put_int(b, 2, i64::from(*runtime));
                    }
                }),
            ),
            Body::Header { producer, min_consumer } => put_message(
                buf,
                21,
                &Raw(|b: &mut Vec<u8>| {
                    put_message(
                        b,
                        1,
                        &Raw(|v: &mut Vec<u8>| {
                            put_str_opt(v, 1, producer);
                            put_str_opt(v, 2, min_consumer);
                        }),
                    )
                }),
            ),
        }
        put_message(buf, 200, &Raw(|b: &mut Vec<u8>| put_str_opt(b, 1, &self.stream_id)));
    }
}
