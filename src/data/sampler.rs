//! The order of an epoch's samples, computed one position at a time, as
//! PyTorch's samplers yield indices lazily: memory and time per batch do
//! not depend on the dataset's size (a host may report 10^12 samples).
//!
//! A shuffled order depends only on `(seed, epoch)`, so every rank of a
//! distributed job computes the same order without talking. Up to
//! [`MATERIALIZE_MAX`] samples it is a Fisher–Yates shuffle (uniform over
//! all permutations, at most 512 KiB of indices); above, a keyed
//! pseudo-random permutation computed per position: a balanced Feistel
//! network over the smallest even number of bits that holds `n`, with
//! cycle walking to stay inside `0..n` (Black & Rogaway's construction for
//! ciphers on arbitrary domains).
use super::rng::{fisher_yates, SplitMix64};
use std::sync::Arc;

/// The largest dataset whose shuffled order is materialised.
pub const MATERIALIZE_MAX: u64 = 1 << 16;

/// Feistel rounds (six rounds of a strong mixer is far beyond what sample
/// shuffling needs to look random).
const ROUNDS: usize = 6;

/// A bijection of `0..n` keyed by `(seed, epoch)`.
#[derive(Debug, Clone)]
pub struct Permutation {
    n: u64,
    half_bits: u32,
    keys: [u64; ROUNDS],
}

/// SplitMix64's output function, as the round function.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Permutation {
    /// The permutation of `0..n` for one epoch.
    pub fn new(n: u64, seed: u64, epoch: u64) -> Self {
        let bits = 64 - n.saturating_sub(1).leading_zeros();
        let half_bits = bits.div_ceil(2).max(1);
        let mut rng = SplitMix64::for_epoch(seed, epoch);
        let keys = std::array::from_fn(|_| rng.next_u64());
        Permutation { n, half_bits, keys }
    }

    fn encrypt(&self, x: u64) -> u64 {
        let mask = (1u64 << self.half_bits) - 1;
        let (mut left, mut right) = (x >> self.half_bits, x & mask);
        for k in self.keys {
            let f = mix(right ^ k) & mask;
            (left, right) = (right, left ^ f);
        }
        (left << self.half_bits) | right
    }

    /// The sample at position `i` (`i < n`).
    pub fn at(&self, i: u64) -> u64 {
        debug_assert!(i < self.n);
        // The network permutes 0..2^(2 half_bits) < 4n; walking the cycle
        // from i until it re-enters 0..n keeps a bijection of 0..n.
        let mut y = self.encrypt(i);
        while y >= self.n {
            y = self.encrypt(y);
        }
        y
    }
}

/// The order of one epoch: sequential or shuffled.
#[derive(Debug, Clone)]
pub enum EpochOrder {
    /// `0, 1, ..., n - 1`.
    Sequential(u64),
    /// A Fisher–Yates shuffle of a small dataset.
    Listed(Arc<Vec<i64>>),
    /// A keyed permutation of `0..n` computed per position.
    Shuffled(Permutation),
}

impl EpochOrder {
    /// The order of `n` samples for `epoch`.
    pub fn new(n: u64, shuffle: bool, seed: u64, epoch: u64) -> Self {
        match (shuffle, n <= MATERIALIZE_MAX) {
            (false, _) => EpochOrder::Sequential(n),
            (true, true) => EpochOrder::Listed(Arc::new(fisher_yates(n as usize, seed, epoch))),
            (true, false) => EpochOrder::Shuffled(Permutation::new(n, seed, epoch)),
        }
    }

    /// Number of samples.
    pub fn len(&self) -> u64 {
        match self {
            EpochOrder::Sequential(n) => *n,
            EpochOrder::Listed(v) => v.len() as u64,
            EpochOrder::Shuffled(p) => p.n,
        }
    }

    /// Whether there is no sample.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The sample at position `i` (`i < len`).
    pub fn at(&self, i: u64) -> u64 {
        match self {
            EpochOrder::Sequential(_) => i,
            EpochOrder::Listed(v) => v[i as usize] as u64,
            EpochOrder::Shuffled(p) => p.at(i),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_size_is_a_bijection() {
        for n in [1u64, 2, 3, 5, 7, 8, 9, 100, 255, 256, 257, 1000, 4097] {
            let p = Permutation::new(n, 17, 3);
            let mut seen: Vec<u64> = (0..n).map(|i| p.at(i)).collect();
            seen.sort_unstable();
            assert_eq!(seen, (0..n).collect::<Vec<u64>>(), "n = {n}");
        }
    }

    #[test]
    fn orders_depend_on_seed_and_epoch_only() {
        let order = |seed, epoch| (0..500).map(|i| Permutation::new(500, seed, epoch).at(i)).collect::<Vec<_>>();
        assert_eq!(order(1, 2), order(1, 2));
        assert_ne!(order(1, 2), order(1, 3));
        assert_ne!(order(1, 2), order(2, 2));
        assert_ne!(order(1, 2), (0..500).collect::<Vec<u64>>());
    }

    #[test]
    fn shuffles_look_uniform() {
        // Where sample 0 lands over many epochs: every position about as often.
        let n = 10u64;
        let mut counts = [0usize; 10];
        for epoch in 0..20_000 {
            let p = Permutation::new(n, 99, epoch);
            let pos = (0..n).find(|&i| p.at(i) == 0).unwrap();
            counts[pos as usize] += 1;
        }
        assert!(counts.iter().all(|&c| (1700..2300).contains(&c)), "{counts:?}");
    }

    #[test]
    fn small_datasets_are_fisher_yates_large_ones_feistel() {
        assert!(matches!(EpochOrder::new(MATERIALIZE_MAX, true, 1, 2), EpochOrder::Listed(_)));
        assert!(matches!(EpochOrder::new(MATERIALIZE_MAX + 1, true, 1, 2), EpochOrder::Shuffled(_)));
        let small = EpochOrder::new(100, true, 7, 3);
        let fy = fisher_yates(100, 7, 3);
        assert!((0..100).all(|i| small.at(i) as i64 == fy[i as usize]));
    }

    #[test]
    fn huge_datasets_cost_nothing_up_front() {
        let p = Permutation::new(1_000_000_000_000, 5, 0);
        let firsts: Vec<u64> = (0..64).map(|i| p.at(i)).collect();
        assert!(firsts.iter().all(|&x| x < 1_000_000_000_000));
        let mut unique = firsts.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), 64);
        assert_eq!(EpochOrder::new(u64::MAX, false, 0, 0).at(u64::MAX - 1), u64::MAX - 1);
        let last = Permutation::new(u64::MAX, 1, 1).at(12345);
        assert!(last < u64::MAX);
    }
}
