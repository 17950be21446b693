//! ModelSummary: a table of the model's layers with their parameter counts,
//! printed when fit starts (Lightning's `enable_model_summary`).
use crate::error::Result;
use crate::nn::Module;

/// One row of the summary.
#[derive(Debug, Clone, PartialEq)]
pub struct SummaryRow {
    /// Dotted path of the layer ("0", "encoder.1").
    pub name: String,
    /// Its type ("Linear", "Sequential").
    pub kind: String,
    /// Parameters in the layer and its children.
    pub params: i64,
}

/// The ModelSummary: rows down to `max_depth` levels.
pub struct ModelSummary {
    /// Rows in tree order.
    pub rows: Vec<SummaryRow>,
    /// All parameters.
    pub total: i64,
    /// Parameters that require grad.
    pub trainable: i64,
}

fn collect(m: &Module, prefix: &str, depth: usize, max_depth: usize, rows: &mut Vec<SummaryRow>) -> Result<()> {
    if depth > max_depth {
        return Ok(());
    }
    for name in m.child_names() {
        let child = m.child(&name)?;
        let path = if prefix.is_empty() { name.clone() } else { format!("{prefix}.{name}") };
        rows.push(SummaryRow {
            name: path.clone(),
            kind: child.type_name().to_string(),
            params: child.num_parameters(),
        });
        collect(child, &path, depth + 1, max_depth, rows)?;
    }
    Ok(())
}

impl ModelSummary {
    /// Summarises `m` down to `max_depth` (1 = direct children).
    pub fn of(m: &Module, max_depth: usize) -> Result<Self> {
        let mut rows = Vec::new();
        let script = m.script_children(max_depth.max(1))?.unwrap_or_default();
        if !script.is_empty() {
            rows = script.into_iter().map(|(name, kind, params)| SummaryRow { name, kind, params }).collect();
        } else if m.child_names().is_empty() {
            rows.push(SummaryRow { name: String::new(), kind: m.type_name().to_string(), params: m.num_parameters() });
        } else {
            collect(m, "", 1, max_depth.max(1), &mut rows)?;
        }
        let trainable = m.parameters().iter().filter(|p| p.requires_grad()).map(|p| p.numel() as i64).sum();
        Ok(ModelSummary { rows, total: m.num_parameters(), trainable })
    }

    /// The table as Lightning prints it.
    pub fn render(&self) -> String {
        let wi = self.rows.len().saturating_sub(1).to_string().len();
        let wn = self.rows.iter().map(|r| r.name.len()).max().unwrap_or(0).max(4);
        let wk = self.rows.iter().map(|r| r.kind.len()).max().unwrap_or(0).max(4);
        let header = format!("{:<wi$} | {:<wn$} | {:<wk$} | {:>8}", "", "Name", "Type", "Params");
        let rule = "-".repeat(header.len());
        let mut out = format!("{header}\n{rule}\n");
        for (i, r) in self.rows.iter().enumerate() {
            out.push_str(&format!("{i:<wi$} | {:<wn$} | {:<wk$} | {:>8}\n", r.name, r.kind, human(r.params)));
        }
        out.push_str(&format!("{rule}\n"));
        out.push_str(&format!("{:<8} Trainable params\n", human(self.trainable)));
        out.push_str(&format!("{:<8} Non-trainable params\n", human(self.total - self.trainable)));
        out.push_str(&format!("{:<8} Total params\n", human(self.total)));
        out
    }
}

/// Parameter counts as Lightning shows them: 203 K, 1.2 M.
pub fn human(n: i64) -> String {
    let f = n as f64;
    if n < 1000 {
        n.to_string()
    } else if n < 1_000_000 {
        format!("{:.1} K", f / 1e3)
    } else if n < 1_000_000_000 {
        format!("{:.1} M", f / 1e6)
    } else {
        format!("{:.1} B", f / 1e9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::Activation;

    #[test]
    fn mlp_rows_and_totals() {
        let mut m = Module::sequential();
        m.push(Module::linear(784, 256, true).unwrap()).unwrap();
        m.push(Module::activation(Activation::Relu)).unwrap();
        m.push(Module::linear(256, 10, true).unwrap()).unwrap();
        let s = ModelSummary::of(&m, 1).unwrap();
        assert_eq!(s.rows.len(), 3);
        assert_eq!(s.rows[0], SummaryRow { name: "0".into(), kind: "Linear".into(), params: 200960 });
        assert_eq!(s.total, 203530);
        assert_eq!(s.trainable, 203530);
        assert!(s.render().contains("203.5 K  Total params"));
    }

    #[test]
    fn rows_stay_aligned_past_ten() {
        let mut m = Module::sequential();
        for _ in 0..12 {
            m.push(Module::linear(4, 4, true).unwrap()).unwrap();
        }
        let text = ModelSummary::of(&m, 1).unwrap().render();
        let lines: Vec<&str> = text.lines().take(14).collect();
        let bar = lines[0].find('|').unwrap();
        for line in lines.iter().filter(|l| l.contains('|')) {
            assert_eq!(line.find('|'), Some(bar), "{text}");
            assert_eq!(line.len(), lines[0].len(), "{text}");
        }
        assert!(lines[13].starts_with("11 | 11 "), "{text}");
    }
}
