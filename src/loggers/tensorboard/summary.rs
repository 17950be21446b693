//! The summaries the logger writes: scalars, and the hparams plugin's three
//! summaries as `torch.utils.tensorboard.summary.hparams` builds them.
use super::proto::{
    DataType, Experiment, HParamInfo, HParamsData, HParamsPluginData, Message, MetricInfo, PluginData, ProtoValue,
    SessionEndInfo, SessionStartInfo, Status, Summary, SummaryMetadata, SummaryValue,
};
use std::collections::BTreeMap;

/// The hparams plugin's name in `PluginData`.
pub const HPARAMS_PLUGIN: &str = "hparams";
/// Tag of the summary holding the `Experiment`.
pub const EXPERIMENT_TAG: &str = "_hparams_/experiment";
/// Tag of the summary holding the `SessionStartInfo`.
pub const SESSION_START_INFO_TAG: &str = "_hparams_/session_start_info";
/// Tag of the summary holding the `SessionEndInfo`.
pub const SESSION_END_INFO_TAG: &str = "_hparams_/session_end_info";
/// `HParamsPluginData.version` as torch writes it.
const PLUGIN_DATA_VERSION: i32 = 0;

/// One `simple_value` per entry (tag = name), stored as f32 as TensorBoard does.
pub fn scalars<'a>(values: impl IntoIterator<Item = (&'a str, f64)>) -> Summary {
    Summary {
        value: values
            .into_iter()
            .map(|(tag, v)| SummaryValue { tag: tag.to_string(), simple_value: Some(v as f32), ..Default::default() })
            .collect(),
    }
}

/// How an hparam's text is typed: a finite number becomes `number_value`,
/// `true`/`false` (or Python's `True`/`False`) `bool_value`, anything else
/// `string_value`.
pub fn hparam_value(text: &str) -> ProtoValue {
    match text {
        "true" | "True" => ProtoValue::Bool(true),
        "false" | "False" => ProtoValue::Bool(false),
        _ => match text.trim().parse::<f64>() {
            Ok(v) if v.is_finite() => ProtoValue::Number(v),
            _ => ProtoValue::String(text.to_string()),
        },
    }
}

/// A summary with one value that carries only hparams plugin data.
fn plugin_summary(tag: &str, data: HParamsData) -> Summary {
    let content = HParamsPluginData { version: PLUGIN_DATA_VERSION, data }.encode();
    let plugin_data = PluginData { plugin_name: HPARAMS_PLUGIN.to_string(), content };
    Summary {
        value: vec![SummaryValue {
            tag: tag.to_string(),
            metadata: Some(SummaryMetadata { plugin_data }),
            ..Default::default()
        }],
    }
}

/// The experiment, session-start and session-end summaries (in that order)
/// for `params`, with `metrics` as the tags of the hparams table's metric
/// columns; the session ends with `STATUS_SUCCESS`, as in torch.
pub fn hparams(params: &BTreeMap<String, String>, metrics: &[&str]) -> [Summary; 3] {
    let values: Vec<(String, ProtoValue)> = params.iter().map(|(k, v)| (k.clone(), hparam_value(v))).collect();
    let hparam_infos = values
        .iter()
        .map(|(name, v)| HParamInfo {
            name: name.clone(),
            data_type: match v {
                ProtoValue::Number(_) => DataType::Float64,
                ProtoValue::String(_) => DataType::String,
                ProtoValue::Bool(_) => DataType::Bool,
            },
        })
        .collect();
    let metric_infos = metrics.iter().map(|tag| MetricInfo { group: String::new(), tag: tag.to_string() }).collect();
    [
        plugin_summary(EXPERIMENT_TAG, HParamsData::Experiment(Experiment { hparam_infos, metric_infos })),
        plugin_summary(SESSION_START_INFO_TAG, HParamsData::SessionStartInfo(SessionStartInfo { hparams: values })),
        plugin_summary(SESSION_END_INFO_TAG, HParamsData::SessionEndInfo(SessionEndInfo { status: Status::Success })),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hparam_typing() {
        assert_eq!(hparam_value("0.001"), ProtoValue::Number(0.001));
        assert_eq!(hparam_value("32"), ProtoValue::Number(32.0));
        assert_eq!(hparam_value("1e-3"), ProtoValue::Number(0.001));
        assert_eq!(hparam_value("true"), ProtoValue::Bool(true));
        assert_eq!(hparam_value("False"), ProtoValue::Bool(false));
        assert_eq!(hparam_value("adam"), ProtoValue::String("adam".into()));
        assert_eq!(hparam_value("nan"), ProtoValue::String("nan".into()));
        assert_eq!(hparam_value(""), ProtoValue::String(String::new()));
    }

    #[test]
    fn hparams_summaries() {
        let params: BTreeMap<String, String> = [("lr".to_string(), "0.1".to_string())].into();
        let [exp, ssi, sei] = hparams(&params, &["hp_metric"]);
        assert_eq!(exp.value[0].tag, EXPERIMENT_TAG);
        assert_eq!(ssi.value[0].tag, SESSION_START_INFO_TAG);
        assert_eq!(sei.value[0].tag, SESSION_END_INFO_TAG);
        let end = &sei.value[0].metadata.as_ref().unwrap().plugin_data;
        assert_eq!(end.plugin_name, "hparams");
        // HParamsPluginData { session_end_info (4) { status (1) = 1 } }.
        assert_eq!(end.content, [0x22, 2, 0x08, 1]);
    }
}
