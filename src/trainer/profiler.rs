//! The simple profiler (Lightning's `profiler="simple"`): wall time of each
//! hook of each callback and of the module, of the steps, backward, the
//! optimizer steps and the batch fetches, summed per action and reported
//! at the end of the run as Lightning's table.
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Durations recorded per action.
#[derive(Debug, Default, Clone)]
pub struct SimpleProfiler {
    /// Action -> (calls, total time).
    actions: HashMap<String, (u64, Duration)>,
    /// When the run began (the "Total" row).
    began: Option<Instant>,
    /// Whether each timed action is also a named scope of libtorch's
    /// profiler (`profiler="pytorch"`).
    scopes: bool,
}

impl SimpleProfiler {
    /// A profiler whose total time runs from now.
    pub fn start() -> Self {
        SimpleProfiler { actions: HashMap::new(), began: Some(Instant::now()), scopes: false }
    }

    /// A started profiler when the options ask for one (either kind).
    pub fn when(kind: super::options::ProfilerKind) -> Option<Self> {
        use super::options::ProfilerKind;
        match kind {
            ProfilerKind::Off => None,
            ProfilerKind::Simple => Some(Self::start()),
            ProfilerKind::PyTorch => Some(SimpleProfiler { scopes: true, ..Self::start() }),
        }
    }

    /// Adds one call of `action` that took `took`.
    pub fn record(&mut self, action: &str, took: Duration) {
        match self.actions.get_mut(action) {
            Some(entry) => {
                entry.0 += 1;
                entry.1 += took;
            }
            None => {
                self.actions.insert(action.to_string(), (1, took));
            }
        }
    }

    /// Number of calls and total time of `action`, if recorded.
    pub fn get(&self, action: &str) -> Option<(u64, Duration)> {
        self.actions.get(action).copied()
    }

    /// Lightning's report: one row per action, the longest total first,
    /// with its mean, calls, total and share of the run's time.
    pub fn describe(&self, stage: &str) -> String {
        let total = self.began.map(|b| b.elapsed()).unwrap_or_default().as_secs_f64();
        let mut rows: Vec<(&String, &(u64, Duration))> = self.actions.iter().collect();
        rows.sort_by(|a, b| b.1 .1.cmp(&a.1 .1).then_with(|| a.0.cmp(b.0)));
        let width = rows.iter().map(|(name, _)| name.len()).max().unwrap_or(0).max("Action".len()).max(5);
        let mut out = format!("{} Profiler Report\n", stage.to_uppercase());
        let header = format!(
            "| {:<width$} | {:>18} | {:>10} | {:>15} | {:>13} |",
            "Action", "Mean duration (s)", "Num calls", "Total time (s)", "Percentage %"
        );
        let rule = "-".repeat(header.len());
        out.push_str(&format!("{rule}\n{header}\n{rule}\n"));
        out.push_str(&format!(
            "| {:<width$} | {:>18} | {:>10} | {:>15.5} | {:>13} |\n",
            "Total",
            "-",
            rows.iter().map(|(_, (n, _))| n).sum::<u64>(),
            total,
            "100 %"
        ));
        out.push_str(&format!("{rule}\n"));
        for (name, (calls, took)) in rows {
            let secs = took.as_secs_f64();
            out.push_str(&format!(
                "| {name:<width$} | {:>18.5} | {calls:>10} | {secs:>15.5} | {:>13.3} |\n",
                secs / *calls as f64,
                if total > 0.0 { 100.0 * secs / total } else { 0.0 }
            ));
        }
        out.push_str(&format!("{rule}\n"));
        out
    }
}

/// Runs `f`, recording its time under `action()` when `profiler` is on
/// (the name is built only then).
pub fn timed<T, S: AsRef<str>>(
    profiler: &mut Option<SimpleProfiler>,
    action: impl FnOnce() -> S,
    f: impl FnOnce() -> T,
) -> T {
    match profiler {
        None => f(),
        Some(p) if p.scopes => {
            let name = action();
            let _scope = super::torch_profiler::scope(name.as_ref());
            let t0 = Instant::now();
            let out = f();
            p.record(name.as_ref(), t0.elapsed());
            out
        }
        Some(p) => {
            let t0 = Instant::now();
            let out = f();
            p.record(action().as_ref(), t0.elapsed());
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_per_action_and_reports_longest_first() {
        let mut p = SimpleProfiler::start();
        p.record("a", Duration::from_millis(2));
        p.record("a", Duration::from_millis(4));
        p.record("[Callback]B.on_fit_start", Duration::from_millis(10));
        assert_eq!(p.get("a"), Some((2, Duration::from_millis(6))));
        let r = p.describe("fit");
        assert!(r.starts_with("FIT Profiler Report\n"), "{r}");
        let b = r.find("[Callback]B.on_fit_start").unwrap();
        let a = r.find("| a ").unwrap();
        assert!(b < a, "{r}");
        assert!(r.contains("0.00300"), "mean of a: {r}");
        let mut off = None;
        assert_eq!(timed(&mut off, || "x", || 3), 3);
        let mut on = Some(SimpleProfiler::start());
        assert_eq!(timed(&mut on, || "x", || 4), 4);
        assert_eq!(on.unwrap().get("x").unwrap().0, 1);
    }
}
