//! The statistic: medians, a randomization threshold, and the verdict.
//!
//! Pure and deterministic: every random draw comes from a [`SmallRng`] seeded by the caller, so
//! the same runs and seed give the same threshold. This is the method of ClickHouse's own
//! performance tests (Box, Hunter & Hunter, "Statistics for experimenters", p. 78):
//!
//! 1. Pool both sides' runs.
//! 2. [`ITERATIONS`] times, split the pool at random into two halves of equal size (one more in
//!    the second half when the pool is odd) and take `|median(half 1) - median(half 2)|`.
//! 3. The threshold is the [`QUANTILE`] of those values, divided by the old median: the largest
//!    relative difference of medians one sees even when nothing changed.
//!
//! The quantile is taken as ClickHouse's `quantileExact` does: the element at index
//! `floor(q * N)` of the sorted values (clamped to the last one).
//!
//! A split touches only ranks, so the pool is sorted once and each split is a random half of
//! the ranks kept in a bit set ([`random_half`]): the median of a half is its k-th set (or unset)
//! bit, found by popcounts. That keeps 10,000 splits of a 1,000-run pool at a few milliseconds.

use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};
use serde::{Deserialize, Serialize};

/// Random splits drawn for one threshold.
pub const ITERATIONS: usize = 10_000;
/// The quantile of the randomization distribution that becomes the threshold.
pub const QUANTILE: f64 = 0.99;

/// What the comparison of one query says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// New is slower: |diff| >= threshold and |diff| >= min-change, diff > 0.
    Slower,
    /// New is faster: |diff| >= threshold and |diff| >= min-change, diff < 0.
    Faster,
    /// The threshold is at least `--unstable`: the query is too noisy to tell.
    Unstable,
    /// |diff| < threshold: what changed is within the noise.
    NotSignificant,
    /// Significant but smaller than `--min-change`.
    TooSmall,
    /// Failed on the left (old) server only.
    ErrorLeft,
    /// Failed on the right (new) server only.
    ErrorRight,
    /// Failed on both servers.
    ErrorBoth,
}

impl Verdict {
    pub const ALL: [Verdict; 8] = [
        Verdict::Slower,
        Verdict::Faster,
        Verdict::Unstable,
        Verdict::NotSignificant,
        Verdict::TooSmall,
        Verdict::ErrorLeft,
        Verdict::ErrorRight,
        Verdict::ErrorBoth,
    ];

    /// The name used in JSON, tables and the history table.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Slower => "slower",
            Verdict::Faster => "faster",
            Verdict::Unstable => "unstable",
            Verdict::NotSignificant => "not_significant",
            Verdict::TooSmall => "too_small",
            Verdict::ErrorLeft => "error_left",
            Verdict::ErrorRight => "error_right",
            Verdict::ErrorBoth => "error_both",
        }
    }

    /// Sort order of reports: slower, faster, unstable, errors, then the rest.
    pub fn rank(self) -> u8 {
        match self {
            Verdict::Slower => 0,
            Verdict::Faster => 1,
            Verdict::Unstable => 2,
            Verdict::ErrorRight => 3,
            Verdict::ErrorLeft => 4,
            Verdict::ErrorBoth => 5,
            Verdict::TooSmall => 6,
            Verdict::NotSignificant => 7,
        }
    }

    pub fn is_error(self) -> bool {
        matches!(self, Verdict::ErrorLeft | Verdict::ErrorRight | Verdict::ErrorBoth)
    }

    /// Slower, or working on the old server and failing on the new one: what `--fail-on` counts.
    pub fn is_regression(self) -> bool {
        matches!(self, Verdict::Slower | Verdict::ErrorRight)
    }
}

/// The decision thresholds, as fractions (0.05 is 5 %).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Rules {
    /// Smallest |diff| reported as slower or faster. Default 0.05.
    pub min_change: f64,
    /// A threshold at least this large makes the query `unstable`. Default 0.10.
    pub unstable: f64,
}

impl Default for Rules {
    fn default() -> Rules {
        Rules { min_change: 0.05, unstable: 0.10 }
    }
}

/// One metric compared: medians, relative difference and relative threshold.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// Median of the old (left) side, in the metric's unit.
    pub old: f64,
    /// Median of the new (right) side.
    pub new: f64,
    /// `(new - old) / old`; None when old is 0.
    pub diff: Option<f64>,
    /// The randomization threshold divided by old; None when old is 0.
    pub threshold: Option<f64>,
}

impl Comparison {
    /// `new / old`; None when old is 0.
    pub fn ratio(&self) -> Option<f64> {
        (self.old != 0.0).then(|| self.new / self.old)
    }

    /// True when the metric moved: |diff| >= threshold and |diff| >= min-change.
    pub fn moved(&self, rules: &Rules) -> bool {
        matches!(self.verdict(rules), Verdict::Slower | Verdict::Faster)
    }

    /// The verdict of these numbers (never an error verdict). Without a relative difference (old
    /// is 0) the answer is `not_significant`.
    pub fn verdict(&self, rules: &Rules) -> Verdict {
        let (Some(diff), Some(t)) = (self.diff, self.threshold) else {
            return Verdict::NotSignificant;
        };
        verdict(diff, t, rules)
    }
}

/// The decision protocol, in order:
/// 1. `slower`/`faster` when |diff| >= T and |diff| >= min-change;
/// 2. else `unstable` when T >= `unstable`;
/// 3. else `not_significant` when |diff| < T;
/// 4. else `too_small`.
pub fn verdict(diff: f64, threshold: f64, rules: &Rules) -> Verdict {
    let d = diff.abs();
    if d >= threshold && d >= rules.min_change {
        if diff > 0.0 {
            Verdict::Slower
        } else {
            Verdict::Faster
        }
    } else if threshold >= rules.unstable {
        Verdict::Unstable
    } else if d < threshold {
        Verdict::NotSignificant
    } else {
        Verdict::TooSmall
    }
}

/// The median (mean of the two middle values for an even count); NaN for no values.
pub fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    (v[(n - 1) / 2] + v[n / 2]) / 2.0
}

/// Compares old and new runs of one metric with a threshold from [`ITERATIONS`] random splits
/// seeded by `seed`, at the [`QUANTILE`]: one look at the runs, as for the server metrics.
pub fn compare(old: &[f64], new: &[f64], seed: u64) -> Comparison {
    compare_at(old, new, seed, ITERATIONS, QUANTILE)
}

/// [`compare`] with the threshold at `quantile` of `iterations` random splits.
pub fn compare_at(old: &[f64], new: &[f64], seed: u64, iterations: usize, quantile: f64) -> Comparison {
    let mut rng = SmallRng::seed_from_u64(seed);
    relative(old, new, randomization_threshold(old, new, &mut rng, iterations, quantile))
}

/// The comparison of `old` and `new` with threshold `t` (seconds), both relative to old's median.
fn relative(old: &[f64], new: &[f64], t: f64) -> Comparison {
    let (mo, mn) = (median(old), median(new));
    let rel = |x: f64| (mo != 0.0 && mo.is_finite()).then(|| x / mo);
    Comparison { old: mo, new: mn, diff: rel(mn - mo), threshold: rel(t) }
}

/// The `quantile` of `|median(half 1) - median(half 2)|` over `iterations` random splits of the
/// pooled runs, in the metric's unit (not divided by anything). 0 for fewer than 2 runs.
pub fn randomization_threshold(old: &[f64], new: &[f64], rng: &mut SmallRng, iterations: usize, quantile: f64) -> f64 {
    let mut sorted: Vec<f64> = old.iter().chain(new).copied().filter(|v| v.is_finite()).collect();
    let n = sorted.len();
    if n < 2 || iterations == 0 {
        return 0.0;
    }
    sorted.sort_by(f64::total_cmp);
    let m1 = n / 2;
    let m2 = n - m1;
    let mut mask = vec![0u64; n.div_ceil(64)];
    let mut diffs = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        random_half(&mut mask, n, m1, rng);
        let med1 = half_median(&sorted, &mask, m1, true);
        let med2 = half_median(&sorted, &mask, m2, false);
        diffs.push((med1 - med2).abs());
    }
    let k = ((quantile * iterations as f64).floor() as usize).min(iterations - 1);
    let (_, v, _) = diffs.select_nth_unstable_by(k, f64::total_cmp);
    *v
}

/// [`compare_at`] for runs that came in pairs: `old[i]` and `new[i]` ran one after the other
/// (a counterbalanced pair, `crate::schedule`), so the threshold is [`paired_threshold`]'s.
pub fn compare_paired_at(old: &[f64], new: &[f64], seed: u64, iterations: usize, quantile: f64) -> Comparison {
    let mut rng = SmallRng::seed_from_u64(seed);
    relative(old, new, paired_threshold(old, new, &mut rng, iterations, quantile))
}

/// The randomization threshold of paired runs: `iterations` times, the two runs of each pair
/// swap sides or stay, each with probability 1/2, and `|median(side 1) - median(side 2)|` is
/// taken; the threshold is its `quantile`. With nothing changed the two runs of a pair are
/// alike but for noise, so every swap is as likely as the runs observed (the sign-flip test of
/// paired data); what the host does to both runs of a pair (its load rising over minutes, a
/// merge, a frequency change) moves both, so it widens this threshold far less than the pooled
/// splits' of [`randomization_threshold`], which take it for noise. Pairs with a value that is
/// not finite are left out; `old` and `new` pair by index, up to the shorter.
pub fn paired_threshold(old: &[f64], new: &[f64], rng: &mut SmallRng, iterations: usize, quantile: f64) -> f64 {
    let pairs: Vec<(f64, f64)> =
        old.iter().zip(new).map(|(a, b)| (*a, *b)).filter(|(a, b)| a.is_finite() && b.is_finite()).collect();
    let n = pairs.len();
    if n < 2 || iterations == 0 {
        return 0.0;
    }
    let (mut one, mut two) = (vec![0.0; n], vec![0.0; n]);
    let mut diffs = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let mut bits = 0u64;
        for (i, (a, b)) in pairs.iter().enumerate() {
            if i % 64 == 0 {
                bits = rng.next_u64();
            }
            let swap = bits & 1 == 1;
            bits >>= 1;
            (one[i], two[i]) = if swap { (*b, *a) } else { (*a, *b) };
        }
        diffs.push((median_in_place(&mut one) - median_in_place(&mut two)).abs());
    }
    let k = ((quantile * iterations as f64).floor() as usize).min(iterations - 1);
    let (_, v, _) = diffs.select_nth_unstable_by(k, f64::total_cmp);
    *v
}

/// The median of `v` (mean of the two middle values for an even count), reordering it; `v` is
/// not empty.
fn median_in_place(v: &mut [f64]) -> f64 {
    let n = v.len();
    let (_, hi, _) = v.select_nth_unstable_by(n / 2, f64::total_cmp);
    let hi = *hi;
    if n % 2 == 1 {
        return hi;
    }
    let lo = v[..n / 2].iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (lo + hi) / 2.0
}

/// Sets `mask` to a uniformly random subset of exactly `m` of the ranks `0..n`.
///
/// A fair coin per rank gives a random subset of about n/2; then random members are dropped (or
/// non-members added) until it has exactly `m`. Every step treats all ranks alike, so every
/// m-subset is equally likely; it costs n/64 draws plus about sqrt(n) corrections instead of the m
/// draws of a shuffle.
fn random_half(mask: &mut [u64], n: usize, m: usize, rng: &mut SmallRng) {
    for w in mask.iter_mut() {
        *w = rng.next_u64();
    }
    let tail = n % 64;
    if tail != 0 {
        if let Some(last) = mask.last_mut() {
            *last &= (1u64 << tail) - 1;
        }
    }
    let mut count: usize = mask.iter().map(|w| w.count_ones() as usize).sum();
    // A uniform rank by multiply-shift; the bias is below n / 2^32, nil here.
    let pick = |rng: &mut SmallRng| (((rng.next_u64() >> 32) * n as u64) >> 32) as usize;
    while count > m {
        let r = pick(rng);
        let bit = 1u64 << (r % 64);
        if mask[r / 64] & bit != 0 {
            mask[r / 64] &= !bit;
            count -= 1;
        }
    }
    while count < m {
        let r = pick(rng);
        let bit = 1u64 << (r % 64);
        if mask[r / 64] & bit == 0 {
            mask[r / 64] |= bit;
            count += 1;
        }
    }
}

/// The median of the half whose ranks have bit `set` in `mask`; the half has `m` members.
fn half_median(sorted: &[f64], mask: &[u64], m: usize, set: bool) -> f64 {
    let a = nth_rank(mask, sorted.len(), (m - 1) / 2, set);
    let b = if m % 2 == 1 { a } else { nth_rank(mask, sorted.len(), m / 2, set) };
    (sorted[a] + sorted[b]) / 2.0
}

/// The k-th (0-based) rank below `n` whose bit in `mask` equals `set`.
fn nth_rank(mask: &[u64], n: usize, mut k: usize, set: bool) -> usize {
    for (w, &word) in mask.iter().enumerate() {
        let mut bits = if set { word } else { !word };
        let valid = n - w * 64;
        if valid < 64 {
            bits &= (1u64 << valid) - 1;
        }
        let c = bits.count_ones() as usize;
        if k < c {
            for _ in 0..k {
                bits &= bits - 1;
            }
            return w * 64 + bits.trailing_zeros() as usize;
        }
        k -= c;
    }
    unreachable!("a half has fewer members than its size says")
}

/// A seed for one comparison, stable across runs and platforms: FNV-1a over the parts, mixed
/// with `seed` by SplitMix64.
pub fn derive_seed(seed: u64, parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.bytes().chain([0xff]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    let mut z = seed ^ h;
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_distr::{Distribution, LogNormal, Normal};

    #[test]
    fn a_drift_both_runs_of_a_pair_share_does_not_widen_the_paired_threshold() {
        // 40 pairs of 0.2 s runs with 3 % noise; then the same runs on a host that slows down by
        // half over them, both runs of a pair alike. The runs' own noise grows with the slowdown
        // (every time is scaled), and the paired threshold by as much (2.6 % to 4.2 %); the
        // pooled splits' takes the drift itself for noise (11.6 %).
        let d = LogNormal::new(0.2f64.ln(), 0.03).unwrap();
        let mut r = SmallRng::seed_from_u64(7);
        let (old, new): (Vec<f64>, Vec<f64>) = (0..40).map(|_| (d.sample(&mut r), d.sample(&mut r))).unzip();
        let drift =
            |v: &[f64]| v.iter().enumerate().map(|(i, x)| x * (1.0 + 0.5 * i as f64 / 40.0)).collect::<Vec<_>>();
        let (dold, dnew) = (drift(&old), drift(&new));
        let t = |o: &[f64], n: &[f64], paired: bool| {
            let c =
                if paired { compare_paired_at(o, n, 1, 20_000, 0.9995) } else { compare_at(o, n, 1, 20_000, 0.9995) };
            c.threshold.unwrap()
        };
        let (flat, drifted, pooled) = (t(&old, &new, true), t(&dold, &dnew, true), t(&dold, &dnew, false));
        assert!(drifted < flat * 1.75, "paired: {drifted} drifting against {flat} flat");
        assert!(pooled > drifted * 2.0, "pooled splits take the drift for noise: {pooled} against {drifted}");
        // The pairs' order is what counts: the same values, pairs broken, widen it again.
        let mut shuffled = dnew.clone();
        shuffled.reverse();
        assert!(t(&dold, &shuffled, true) > drifted * 2.0);
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[5.0]), 5.0);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn half_medians_match_a_plain_median() {
        let mut rng = SmallRng::seed_from_u64(9);
        for n in [2usize, 3, 14, 15, 63, 64, 65, 130, 1000] {
            let sorted: Vec<f64> = (0..n).map(|i| i as f64 * 1.5).collect();
            let m1 = n / 2;
            let mut mask = vec![0u64; n.div_ceil(64)];
            for _ in 0..20 {
                random_half(&mut mask, n, m1, &mut rng);
                let h1: Vec<f64> = (0..n).filter(|r| mask[r / 64] >> (r % 64) & 1 == 1).map(|r| sorted[r]).collect();
                let h2: Vec<f64> = (0..n).filter(|r| mask[r / 64] >> (r % 64) & 1 == 0).map(|r| sorted[r]).collect();
                assert_eq!(h1.len(), m1, "n={n}");
                assert_eq!(h2.len(), n - m1, "bits past n stay clear: n={n}");
                assert_eq!(half_median(&sorted, &mask, m1, true), median(&h1), "n={n}");
                assert_eq!(half_median(&sorted, &mask, n - m1, false), median(&h2), "n={n}");
            }
        }
    }

    #[test]
    fn random_halves_are_uniform() {
        // 6 ranks into halves of 3: each of the 20 subsets about 1/20 of the time, and each rank
        // in half 1 half of the time.
        let mut rng = SmallRng::seed_from_u64(4);
        let mut mask = [0u64];
        let mut seen = std::collections::BTreeMap::new();
        let draws = 40_000;
        for _ in 0..draws {
            random_half(&mut mask, 6, 3, &mut rng);
            *seen.entry(mask[0]).or_insert(0usize) += 1;
        }
        assert_eq!(seen.len(), 20);
        for (m, c) in &seen {
            assert!((1700..2300).contains(c), "subset {m:06b} drawn {c} times of {draws}");
        }
    }

    #[test]
    fn the_decision_protocol_in_order() {
        let r = Rules::default();
        assert_eq!(verdict(0.20, 0.08, &r), Verdict::Slower);
        assert_eq!(verdict(-0.20, 0.08, &r), Verdict::Faster);
        // Equal counts: the distribution is coarse with few runs, so >= is used.
        assert_eq!(verdict(0.08, 0.08, &r), Verdict::Slower);
        assert_eq!(verdict(0.05, 0.01, &r), Verdict::Slower);
        assert_eq!(verdict(0.30, 0.40, &r), Verdict::Unstable);
        assert_eq!(verdict(0.01, 0.10, &r), Verdict::Unstable);
        assert_eq!(verdict(0.01, 0.03, &r), Verdict::NotSignificant);
        assert_eq!(verdict(0.04, 0.03, &r), Verdict::TooSmall);
        assert_eq!(verdict(0.0, 0.0, &r), Verdict::TooSmall);
        let c = Comparison { old: 0.0, new: 3.0, diff: None, threshold: None };
        assert_eq!(c.verdict(&r), Verdict::NotSignificant);
        assert!(!c.moved(&r));
    }

    #[test]
    fn seeded_thresholds_are_reproducible() {
        let old = [1.0, 1.1, 0.9, 1.05, 0.97, 1.02, 1.2];
        let new = [1.3, 1.1, 1.25, 1.4, 1.2, 1.22, 1.31];
        assert_eq!(compare(&old, &new, 7), compare(&old, &new, 7));
        let c = compare(&old, &new, 7);
        assert_eq!(c.old, 1.02);
        assert_eq!(c.new, 1.25);
        assert!((c.diff.unwrap() - 0.23 / 1.02).abs() < 1e-12);
        // Few runs make a coarse distribution: the observed split can be its 99th percentile itself.
        assert!(c.threshold.unwrap() > 0.0 && c.threshold.unwrap() <= c.diff.unwrap(), "{c:?}");
        assert_ne!(derive_seed(1, &["a", "b"]), derive_seed(1, &["ab"]));
        assert_eq!(derive_seed(1, &["q", "client_time"]), derive_seed(1, &["q", "client_time"]));
        // Constant samples: no noise, a zero threshold.
        let c = compare(&[2.0; 7], &[2.0; 7], 1);
        assert_eq!((c.diff, c.threshold), (Some(0.0), Some(0.0)));
        let c = compare(&[0.0; 3], &[1.0; 3], 1);
        assert_eq!(c.diff, None);
    }

    /// Runs `experiments` comparisons of `runs`+`runs` samples drawn by `draw(side, rng)` and
    /// counts verdicts.
    fn experiments(
        experiments: usize,
        runs: usize,
        seed: u64,
        mut draw: impl FnMut(bool, &mut SmallRng) -> f64,
    ) -> std::collections::BTreeMap<Verdict, usize> {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut counts = std::collections::BTreeMap::new();
        for e in 0..experiments {
            let old: Vec<f64> = (0..runs).map(|_| draw(false, &mut rng)).collect();
            let new: Vec<f64> = (0..runs).map(|_| draw(true, &mut rng)).collect();
            let v = compare(&old, &new, e as u64).verdict(&Rules::default());
            *counts.entry(v).or_insert(0) += 1;
        }
        counts
    }

    fn normal(mean: f64, cv: f64) -> Normal<f64> {
        Normal::new(mean, mean * cv).unwrap()
    }

    #[test]
    fn a_a_false_positives_are_rare() {
        // Both sides from one distribution: 1,000 seeded experiments of 7+7 runs each, with normal
        // noise (5 % CV, where --min-change helps, and 20 %, where only the threshold does) and
        // with right-skewed noise as latencies have it.
        let check = |name: &str, c: std::collections::BTreeMap<Verdict, usize>, n: usize| {
            let fp = c.get(&Verdict::Slower).unwrap_or(&0) + c.get(&Verdict::Faster).unwrap_or(&0);
            eprintln!("A/A {name}: {c:?}");
            assert!(fp * 1000 <= 15 * n, "{name}: {fp} of {n} A/A experiments said slower/faster: {c:?}");
        };
        let d = normal(0.1, 0.05);
        check("normal cv 5%", experiments(1000, 7, 11, |_, r| d.sample(r).max(1e-6)), 1000);
        let d = LogNormal::new(-2.3, 0.15).unwrap();
        check("lognormal sigma 0.15", experiments(1000, 7, 12, |_, r| d.sample(r)), 1000);
        let d = normal(0.1, 0.20);
        check("normal cv 20%", experiments(600, 7, 13, |_, r| d.sample(r).max(1e-6)), 600);
    }

    #[test]
    fn a_real_20_percent_slowdown_is_found() {
        let (old, new) = (normal(0.1, 0.05), normal(0.12, 0.05));
        let c = experiments(1000, 7, 21, |right, r| if right { new.sample(r) } else { old.sample(r) });
        let slower = *c.get(&Verdict::Slower).unwrap_or(&0);
        eprintln!("20% slowdown, 5% CV: {c:?}");
        assert!(slower >= 900, "only {slower} of 1000 said slower: {c:?}");
        assert_eq!(c.get(&Verdict::Faster), None);
        // And the same speed-up is faster.
        let c = experiments(300, 7, 22, |right, r| if right { old.sample(r) } else { new.sample(r) });
        assert!(*c.get(&Verdict::Faster).unwrap_or(&0) >= 270, "{c:?}");
    }

    #[test]
    fn a_noisy_query_is_unstable() {
        let d = normal(0.1, 0.30);
        let c = experiments(300, 7, 31, |_, r| d.sample(r).max(1e-6));
        let unstable = *c.get(&Verdict::Unstable).unwrap_or(&0);
        eprintln!("A/A 30% CV: {c:?}");
        assert!(unstable >= 285, "{unstable} of 300 unstable: {c:?}");
    }

    #[test]
    fn large_pools_are_fast_enough() {
        let d = normal(0.001, 0.2);
        let mut rng = SmallRng::seed_from_u64(5);
        let old: Vec<f64> = (0..500).map(|_| d.sample(&mut rng)).collect();
        let new: Vec<f64> = (0..500).map(|_| d.sample(&mut rng)).collect();
        let t = std::time::Instant::now();
        let c = compare(&old, &new, 3);
        assert!(c.threshold.unwrap() < 0.1, "{c:?}");
        // Generous even for an unoptimised test build on a busy machine.
        assert!(t.elapsed() < std::time::Duration::from_secs(5), "{:?}", t.elapsed());
    }
}
