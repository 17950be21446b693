//! The job's failure board: a rank whose run fails for a reason of its own
//! (a non-finite loss, a host callback's error) writes that reason into the
//! job's store before it leaves, so the ranks that then see only a broken
//! collective ("Connection reset by peer", a timeout) can say why, as
//! torchelastic's error files do for Python jobs. Best effort: a store
//! that is gone (rank 0's process ended) leaves the errors as they were.
use super::collectives::KeyStore;
use crate::error::Result;
use libc::c_void;
use std::time::Duration;

/// The longest reason kept (a longer one is cut at a character boundary).
const MAX_REASON: usize = 2048;

/// How long a reader waits for the first reason once a failure is counted
/// (the writer counts it, then writes it).
const READ_WAIT: Duration = Duration::from_secs(2);

/// Reasons of failed ranks, in the job's store under a prefix of their own.
pub(crate) struct FailureBoard {
    keys: KeyStore,
}

impl FailureBoard {
    /// The board of the job whose store is `store` (a live store of the
    /// shim). Per torchrun attempt: its agent store outlives restarts.
    pub(crate) fn open(store: *mut c_void) -> Result<FailureBoard> {
        let attempt = std::env::var("TORCHELASTIC_RESTART_COUNT").unwrap_or_else(|_| "0".into());
        let keys = KeyStore::prefixed(store, &format!("fulmen/failures/{attempt}/"), READ_WAIT, None)?;
        Ok(FailureBoard { keys })
    }

    /// Records why `rank` failed. Only the first failure of the job is
    /// read back; errors are ignored (the rank is failing already).
    pub(crate) fn report(&self, rank: usize, reason: &str) {
        let text = format!("{}{}", headline(rank), truncate(reason, MAX_REASON));
        if let Ok(n) = self.keys.add("count", 1) {
            let _ = self.keys.set(&n.to_string(), text.as_bytes());
        }
    }

    /// The first reason the job recorded, "rank N failed: ...", unless
    /// `reader` recorded it itself.
    pub(crate) fn first_of_others(&self, reader: usize) -> Option<String> {
        if self.keys.add("count", 0).ok()? < 1 {
            return None;
        }
        // The reason is at most MAX_REASON bytes plus its short headline.
        let mut buf = vec![0u8; MAX_REASON + 64];
        let n = self.keys.get("1", &mut buf).ok()?;
        let text = String::from_utf8_lossy(&buf[..n.min(buf.len())]).into_owned();
        (!text.starts_with(&headline(reader))).then_some(text)
    }
}

/// How a recorded reason starts.
fn headline(rank: usize) -> String {
    format!("rank {rank} failed: ")
}

/// `text` cut to at most `max` bytes at a character boundary.
pub(super) fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::truncate;

    #[test]
    fn a_reason_is_cut_at_a_character_boundary() {
        assert_eq!(truncate("short", 10), "short");
        assert_eq!(truncate("ééé", 3), "é");
        assert_eq!(truncate("abcdef", 4), "abcd");
    }
}
