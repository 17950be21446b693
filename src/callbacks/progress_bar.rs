//! The progress bar on stderr: on a terminal it redraws one line per epoch
//! as batches go by (like Lightning's TQDM bar); otherwise it prints one
//! plain line per epoch and per evaluation run.
use crate::error::Result;
use crate::trainer::hooks::{Callback, Hook, HookContext};
use std::collections::BTreeMap;
use std::io::Write;
use std::time::Instant;

/// The progress bar callback.
pub struct ProgressBar {
    terminal: bool,
    refresh_rate: usize,
    epoch_started: Option<Instant>,
    batches: usize,
    last_draw: Option<Instant>,
}

/// The shortest time between two redraws on a terminal (tqdm's
/// `mininterval`).
const MIN_REDRAW_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

impl ProgressBar {
    /// Draws on a terminal when stderr is one.
    pub fn new(refresh_rate: usize) -> Self {
        // SAFETY: isatty only inspects the descriptor.
        let terminal = unsafe { libc::isatty(libc::STDERR_FILENO) } == 1;
        ProgressBar { terminal, refresh_rate: refresh_rate.max(1), epoch_started: None, batches: 0, last_draw: None }
    }

    /// The shown metrics; the running loss is read from the device here,
    /// at a refresh, not at every step.
    fn metrics_text(ctx: &HookContext) -> Result<String> {
        let mut shown: BTreeMap<String, f64> = ctx.state.progress_metrics.snapshot()?;
        if let Some(l) = ctx.state.running_loss.mean()? {
            shown.insert("loss".into(), l);
        }
        Ok(shown.iter().map(|(k, v)| format!("{k}={v:.4}")).collect::<Vec<_>>().join(" "))
    }

    fn epoch_label(ctx: &HookContext) -> String {
        match ctx.state.max_epochs {
            Some(m) => format!("Epoch {}/{m}", ctx.state.epoch + 1),
            None => format!("Epoch {}", ctx.state.epoch + 1),
        }
    }

    fn draw(&mut self, ctx: &HookContext) -> Result<()> {
        self.last_draw = Some(Instant::now());
        let total = ctx.state.num_train_batches;
        let bar = match total {
            Some(t) if t > 0 => {
                let width = 20;
                let filled = (self.batches * width / t).min(width);
                format!("{}/{} [{}{}]", self.batches, t, "=".repeat(filled), " ".repeat(width - filled))
            }
            _ => format!("{} batches", self.batches),
        };
        let metrics = Self::metrics_text(ctx)?;
        let _ = write!(std::io::stderr(), "\r\x1b[2K{}: {bar} {metrics}", Self::epoch_label(ctx));
        Ok(())
    }
}

impl Callback for ProgressBar {
    fn name(&self) -> String {
        "ProgressBar".into()
    }

    fn on_hook(&mut self, ctx: &mut HookContext) -> Result<()> {
        match ctx.hook {
            Hook::TrainEpochStart => {
                self.epoch_started = Some(Instant::now());
                self.batches = 0;
            }
            Hook::TrainBatchEnd => {
                self.batches += 1;
                // As tqdm's `mininterval`: at most one redraw per 0.1 s, so
                // fast steps do not wait for their device to show a loss.
                let due = self.last_draw.is_none_or(|t| t.elapsed() >= MIN_REDRAW_INTERVAL);
                if self.terminal && self.batches % self.refresh_rate == 0 && due {
                    self.draw(ctx)?;
                }
            }
            Hook::TrainEpochEnd => {
                let secs = self.epoch_started.map_or(0.0, |s| s.elapsed().as_secs_f64());
                let mut err = std::io::stderr();
                if self.terminal {
                    self.draw(ctx)?;
                    let _ = writeln!(err, " [{secs:.2}s]");
                } else {
                    let _ = writeln!(
                        err,
                        "{}: {} batches in {secs:.2}s  {}",
                        Self::epoch_label(ctx),
                        self.batches,
                        Self::metrics_text(ctx)?
                    );
                }
            }
            _ => {}
        }
        Ok(())
    }
}
