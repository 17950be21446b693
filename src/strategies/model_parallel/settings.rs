//! The model_parallel strategy's settings (Lightning's
//! `ModelParallelStrategy(data_parallel_size, tensor_parallel_size)`, and
//! the plan its `configure_model` would give `parallelize_module`).
use crate::error::{Error, ErrorCode, Result};
use crate::nn::ParallelStyle;

/// The settings' names, for messages.
pub(crate) const KEYS: &str =
    "tensor_parallel_plan, data_parallel_size, tensor_parallel_size, save_distributed_checkpoint";

/// Most layers a plan names.
const MAX_PLAN: usize = 4096;

/// How the model is split across the ranks, and how checkpoints of it
/// are written.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelParallelOptions {
    /// The layers to split and how, by dotted path.
    pub plan: Vec<(String, ParallelStyle)>,
    /// Lightning's `data_parallel_size` (`None`: "auto").
    pub data_parallel_size: Option<usize>,
    /// Lightning's `tensor_parallel_size` (`None`: "auto").
    pub tensor_parallel_size: Option<usize>,
    /// Lightning's `save_distributed_checkpoint`: each checkpoint a
    /// torch.distributed.checkpoint directory of every rank's parts
    /// (`true`, Lightning's default), or one file gathered whole.
    pub save_distributed_checkpoint: bool,
}

impl Default for ModelParallelOptions {
    fn default() -> Self {
        ModelParallelOptions {
            plan: Vec::new(),
            data_parallel_size: None,
            tensor_parallel_size: None,
            save_distributed_checkpoint: true,
        }
    }
}

/// Parses "path=style, path=style, ..." ("none" or "": no layer).
fn parse_plan(text: &str) -> Result<Vec<(String, ParallelStyle)>> {
    let text = text.trim();
    if text.is_empty() || text.eq_ignore_ascii_case("none") {
        return Ok(Vec::new());
    }
    let mut plan: Vec<(String, ParallelStyle)> = Vec::new();
    for (i, item) in text.split(',').enumerate() {
        if i >= MAX_PLAN {
            return Err(Error::invalid(format!("tensor_parallel_plan: more than {MAX_PLAN} layers")));
        }
        let Some((path, style)) = item.split_once('=') else {
            return Err(Error::invalid(format!(
                "tensor_parallel_plan: {item:?} is not path=style (such as \"1=colwise\")"
            )));
        };
        let path = path.trim();
        if plan.iter().any(|(p, _)| p == path) {
            return Err(Error::invalid(format!("tensor_parallel_plan names {path:?} twice")));
        }
        let style = ParallelStyle::parse(style).map_err(|e| e.context(format!("tensor_parallel_plan: {path:?}")))?;
        plan.push((path.to_owned(), style));
    }
    Ok(plan)
}

/// Parses a size: "auto" or an integer >= 1.
fn parse_size(key: &str, v: &str) -> Result<Option<usize>> {
    if v.eq_ignore_ascii_case("auto") {
        return Ok(None);
    }
    v.parse::<usize>()
        .ok()
        .filter(|n| *n >= 1)
        .map(Some)
        .ok_or_else(|| Error::invalid(format!("{key}: {v:?} is not \"auto\" or an integer >= 1")))
}

impl ModelParallelOptions {
    /// Sets `key` from text when it is one of these settings; false for
    /// other keys.
    pub fn set(&mut self, key: &str, v: &str) -> Result<bool> {
        match key {
            "tensor_parallel_plan" => self.plan = parse_plan(v)?,
            "data_parallel_size" => self.data_parallel_size = parse_size(key, v)?,
            "tensor_parallel_size" => self.tensor_parallel_size = parse_size(key, v)?,
            "save_distributed_checkpoint" => self.save_distributed_checkpoint = crate::parse::parse_bool(key, v)?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Checks the settings against a job of `world` ranks on `num_nodes`
    /// nodes: one data-parallel replica (2-D parallelism with FSDP is not
    /// built yet), every rank in the tensor-parallel group.
    pub fn check(&self, world: usize, num_nodes: usize) -> Result<()> {
        if self.plan.is_empty() {
            return Err(Error::invalid(
                "strategy \"model_parallel\" needs a tensor_parallel_plan (\"path=style, ...\", the layers \
                 parallelize_module would split)",
            ));
        }
        let dp = self.data_parallel_size.unwrap_or(num_nodes);
        let tp = self.tensor_parallel_size.unwrap_or(world / dp.max(1));
        if dp != 1 || tp != world {
            return Err(Error::new(
                ErrorCode::Unsupported,
                format!(
                    "model_parallel with data_parallel_size {dp} and tensor_parallel_size {tp} on {world} rank(s): \
                     fulmen splits the model across every rank (data_parallel_size 1, tensor_parallel_size = the \
                     world size); data parallelism beside it (2-D, with FSDP) is not built yet"
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_and_sizes_parse() {
        let mut o = ModelParallelOptions::default();
        assert!(o.set("tensor_parallel_plan", " 0=rowwise_replicated_input, layers.1=Colwise ,2=rowwise").unwrap());
        assert_eq!(
            o.plan,
            vec![
                ("0".to_owned(), ParallelStyle::RowwiseReplicatedInput),
                ("layers.1".to_owned(), ParallelStyle::Colwise),
                ("2".to_owned(), ParallelStyle::Rowwise)
            ]
        );
        assert!(o.set("tensor_parallel_plan", "1=colwise,1=rowwise").is_err());
        assert!(o.set("tensor_parallel_plan", "1:colwise").is_err());
        assert!(o.set("tensor_parallel_plan", "1=diagonal").is_err());
        assert!(!o.set("colour", "red").unwrap());
        assert!(o.save_distributed_checkpoint);
        assert!(o.set("save_distributed_checkpoint", "false").unwrap());
        assert!(!o.save_distributed_checkpoint);
        assert!(o.set("save_distributed_checkpoint", "maybe").is_err());
        o.check(2, 1).unwrap();
        assert!(o.set("data_parallel_size", "0").is_err());
        o.set("data_parallel_size", "2").unwrap();
        assert_eq!(o.check(4, 1).unwrap_err().code, ErrorCode::Unsupported);
        o.set("data_parallel_size", "auto").unwrap();
        o.set("tensor_parallel_size", "3").unwrap();
        assert_eq!(o.check(4, 1).unwrap_err().code, ErrorCode::Unsupported);
        o.set("tensor_parallel_size", "4").unwrap();
        o.check(4, 1).unwrap();
        assert_eq!(o.check(4, 2).unwrap_err().code, ErrorCode::Unsupported);
        o.set("tensor_parallel_plan", "none").unwrap();
        assert!(o.check(4, 1).is_err());
    }
}
