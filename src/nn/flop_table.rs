//! `FlopCounterMode.get_table(depth)`: a measurement's counts by module as
//! torch prints them (its number suffixes and percentages, laid out as
//! tabulate's "simple" format with the column alignments torch asks for).
use super::flop_counter::FlopCounts;
use crate::error::Result;

const SUFFIXES: [&str; 5] = ["", "K", "M", "B", "T"];

/// The suffix torch scales every number of a table by, from the total:
/// 1.01B shows as 1010.000M.
fn suffix_index(total: u64) -> usize {
    let digits = total.to_string().len();
    (digits.saturating_sub(2) / 3).min(SUFFIXES.len() - 1)
}

fn with_suffix(n: u64, index: usize) -> String {
    format!("{:.3}{}", n as f64 / 1000f64.powi(index as i32), SUFFIXES[index])
}

fn percent(n: u64, total: u64) -> String {
    if total == 0 {
        return "0%".to_owned();
    }
    format!("{:.2}%", n as f64 / total as f64 * 100.0)
}

impl FlopCounts {
    /// The table `FlopCounterMode.get_table(depth)` prints: every module
    /// at most `depth` names deep (torch's default is 2) with its FLOPs and
    /// its operators' (in the order first counted), "Global" first when some
    /// FLOPs fall outside every module shown.
    pub fn table(&self, depth: usize) -> Result<String> {
        let total = self.total;
        let index = suffix_index(total);
        let mut subsumed = false;
        let mut rows: Vec<[String; 3]> = Vec::new();
        let module_rows = |name: &str, sum: u64, indent: usize| {
            let pad = " ".repeat(indent);
            let mut out = vec![[format!("{pad}{name}"), with_suffix(sum, index), percent(sum, total)]];
            for (op, n) in self.operators(name) {
                out.push([format!("{pad} - {}", op.replace("::", ".")), with_suffix(n, index), percent(n, total)]);
            }
            out
        };
        for name in self.by_module.keys() {
            let module_depth = name.matches('.').count() + 1;
            if module_depth <= depth {
                let sum = self.module_total(name)?;
                subsumed |= sum >= total;
                rows.extend(module_rows(name, sum, module_depth - 1));
            }
        }
        if !self.by_operator.is_empty() && !subsumed {
            let mut global = module_rows("Global", total, 0);
            for row in &mut rows {
                row[0].insert(0, ' ');
            }
            global.append(&mut rows);
            rows = global;
        }
        if rows.is_empty() {
            rows.push(["Global".to_owned(), "0".to_owned(), "0%".to_owned()]);
        }
        Ok(layout(["Module", "FLOP", "% Total"], &rows))
    }
}

/// tabulate's "simple" format: the first column left-aligned, the others
/// right-aligned, each as wide as its widest cell and its header plus 2,
/// columns two spaces apart, a dashed line under the header.
fn layout(header: [&str; 3], rows: &[[String; 3]]) -> String {
    let mut widths = header.map(|h| h.chars().count() + 2);
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 3]| {
        let parts: Vec<String> = cells
            .iter()
            .zip(widths)
            .enumerate()
            .map(|(i, (c, w))| if i == 0 { format!("{c:<w$}") } else { format!("{c:>w$}") })
            .collect();
        parts.join("  ")
    };
    let mut out = vec![line(header), widths.map(|w| "-".repeat(w)).join("  ")];
    out.extend(rows.iter().map(|r| line([&r[0], &r[1], &r[2]])));
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::collections::BTreeMap;

    fn counts(global: &[(&str, u64)], modules: &[(&str, &[(&str, u64)])]) -> FlopCounts {
        let ops = |p: &[(&str, u64)]| p.iter().map(|(k, v)| (k.to_string(), *v)).collect::<BTreeMap<_, _>>();
        let order = |p: &[(&str, u64)]| p.iter().map(|(k, _)| k.to_string()).collect::<Vec<_>>();
        let by_operator = ops(global);
        let mut first_counted: BTreeMap<String, Vec<String>> =
            modules.iter().map(|(m, p)| (m.to_string(), order(p))).collect();
        first_counted.insert("Global".to_owned(), order(global));
        FlopCounts {
            total: by_operator.values().sum(),
            by_operator,
            by_module: modules.iter().map(|(m, p)| (m.to_string(), ops(p))).collect(),
            first_counted,
        }
    }

    #[test]
    fn a_table_matches_torchs_layout() {
        // FlopCounterMode around MLP's forward and backward and a 3x4x5
        // product outside it, printed by get_table(9) with tabulate 0.9.
        let c = counts(
            &[("aten::addmm", 122880), ("aten::mm", 163960)],
            &[
                ("MLP", &[("aten::addmm", 122880), ("aten::mm", 163840)]),
                ("MLP.net", &[("aten::addmm", 122880), ("aten::mm", 163840)]),
                ("MLP.net.0", &[("aten::addmm", 81920), ("aten::mm", 81920)]),
                ("MLP.net.3", &[("aten::addmm", 40960), ("aten::mm", 81920)]),
            ],
        );
        let want = "\
Module                FLOP    % Total
----------------  --------  ---------
Global            286.840K    100.00%
 - aten.addmm     122.880K     42.84%
 - aten.mm        163.960K     57.16%
 MLP              286.720K     99.96%
  - aten.addmm    122.880K     42.84%
  - aten.mm       163.840K     57.12%
  MLP.net         286.720K     99.96%
   - aten.addmm   122.880K     42.84%
   - aten.mm      163.840K     57.12%
   MLP.net.0      163.840K     57.12%
    - aten.addmm   81.920K     28.56%
    - aten.mm      81.920K     28.56%
   MLP.net.3      122.880K     42.84%
    - aten.addmm   40.960K     14.28%
    - aten.mm      81.920K     28.56%";
        assert_eq!(c.table(9).unwrap(), want);
    }

    #[test]
    fn operators_show_in_the_order_first_counted() {
        let c = counts(
            &[("aten::convolution", 2000), ("aten::addmm", 1000)],
            &[("CNN", &[("aten::convolution", 2000), ("aten::addmm", 1000)])],
        );
        let table = c.table(2).unwrap();
        let conv = table.find("aten.convolution").unwrap();
        assert!(conv < table.find("aten.addmm").unwrap(), "{table}");
    }

    #[test]
    fn global_is_left_out_when_a_module_holds_everything_and_an_empty_count_has_a_row() {
        let c = counts(&[("aten::mm", 1_010_000_000)], &[("Net", &[("aten::mm", 1_010_000_000)])]);
        // get_suffix_str: ten digits show in millions.
        let want = "Module           FLOP    % Total\n----------  ---------  ---------\nNet         1010.000M    100.00%\n - aten.mm  1010.000M    100.00%";
        assert_eq!(c.table(2).unwrap(), want);
        let empty = counts(&[], &[]).table(2).unwrap();
        assert_eq!(empty, "Module      FLOP    % Total\n--------  ------  ---------\nGlobal         0         0%");
    }
}
