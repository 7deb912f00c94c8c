//! The figures behind docs/COMPARE.md's "How the stopping rule keeps false positives at 1 %":
//!
//! 1. The constant boundary of a sequential design, by simulation of its normal approximation:
//!    the difference of medians after n runs, standardised, behaves as `B(n) / sqrt(n)` for a
//!    Brownian motion B; the boundary c is the 99th percentile of `max |B(n_k)| / sqrt(n_k)` over
//!    the looks n_k. Printed for one look, for compare's looks (5, 6, ... growing by a tenth to
//!    500, and the last), and for a look after every pair.
//! 2. The threshold against the number of runs: the median threshold of seeded A/A samples of
//!    log-normal noise (log-sd 5 %), at the single-look quantile (0.99 of 10,000 splits) and at
//!    every look's (0.9995 of 20,000), beside the normal approximation `z 1.2533 sigma
//!    sqrt(2 / n)`.
//!
//! `cargo run -p chstorm-compare --example thresholds` (seeded: the same figures every time).

use chstorm_compare::sequential::{next_look, LOOK_ITERATIONS, LOOK_QUANTILE};
use chstorm_compare::stats::{compare_at, median, ITERATIONS, QUANTILE};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use rand_distr::{Distribution, LogNormal, Normal};

fn boundary(looks: &[usize], alpha: f64, sims: usize, seed: u64) -> f64 {
    let mut rng = SmallRng::seed_from_u64(seed);
    let z = Normal::new(0.0, 1.0).unwrap();
    let mut maxima: Vec<f64> = (0..sims)
        .map(|_| {
            let (mut b, mut prev, mut m) = (0.0f64, 0usize, 0.0f64);
            for &n in looks {
                b += z.sample(&mut rng) * ((n - prev) as f64).sqrt();
                prev = n;
                m = m.max(b.abs() / (n as f64).sqrt());
            }
            m
        })
        .collect();
    maxima.sort_by(f64::total_cmp);
    maxima[((1.0 - alpha) * sims as f64) as usize]
}

fn main() {
    let mut looks = vec![5];
    while *looks.last().unwrap() < 500 {
        looks.push(next_look(*looks.last().unwrap()).min(500));
    }
    let every_pair: Vec<usize> = (5..=500).collect();
    println!("constant boundary for alpha = 1 % (standard errors), 400,000 simulated sequences:");
    println!("  one look: {:.2}", boundary(&[7], 0.01, 400_000, 1));
    println!("  compare's looks ({} looks, 5 to 500 runs): {:.2}", looks.len(), boundary(&looks, 0.01, 400_000, 2));
    println!("  a look after every pair ({} looks): {:.2}", every_pair.len(), boundary(&every_pair, 0.01, 400_000, 3));
    let z = |q: f64| {
        // The two-sided normal quantile of q, by bisection.
        let (mut lo, mut hi) = (0.0f64, 10.0f64);
        for _ in 0..100 {
            let mid = (lo + hi) / 2.0;
            let tail = libm_erfc(mid / std::f64::consts::SQRT_2);
            if 1.0 - tail < q {
                lo = mid
            } else {
                hi = mid
            }
        }
        lo
    };
    println!(
        "  the look quantile {LOOK_QUANTILE} is {:.2} standard errors; the single-look {QUANTILE} is {:.2}",
        z(LOOK_QUANTILE),
        z(QUANTILE)
    );

    let sigma = 0.05;
    let d = LogNormal::new(0.0, sigma).unwrap();
    println!("\nmedian threshold of A/A runs, log-normal noise, log-sd {sigma} (200 seeded samples each):");
    println!("{:>6} {:>12} {:>12} {:>12} {:>16}", "runs", "0.99 (%)", "0.9995 (%)", "normal (%)", "0.9995 x sqrt(n)");
    for n in [5usize, 7, 10, 15, 20, 30, 40, 60, 80, 120, 200, 500] {
        let mut rng = SmallRng::seed_from_u64(n as u64);
        let (mut single, mut seq) = (Vec::new(), Vec::new());
        for e in 0..200u64 {
            let old: Vec<f64> = (0..n).map(|_| d.sample(&mut rng)).collect();
            let new: Vec<f64> = (0..n).map(|_| d.sample(&mut rng)).collect();
            single.push(compare_at(&old, &new, e, ITERATIONS, QUANTILE).threshold.unwrap());
            seq.push(compare_at(&old, &new, e, LOOK_ITERATIONS, LOOK_QUANTILE).threshold.unwrap());
        }
        let normal = z(LOOK_QUANTILE) * 1.2533 * sigma * (2.0 / n as f64).sqrt();
        let (s, q) = (median(&single), median(&seq));
        println!(
            "{n:>6} {:>12.1} {:>12.1} {:>12.1} {:>16.3}",
            100.0 * s,
            100.0 * q,
            100.0 * normal,
            q * (n as f64).sqrt()
        );
    }
}

/// The complementary error function (Numerical Recipes' erfcc, relative error below 1.2e-7).
fn libm_erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t
        * (-z * z - 1.26551223
            + t * (1.00002368
                + t * (0.37409196
                    + t * (0.09678418
                        + t * (-0.18628806
                            + t * (0.27886807
                                + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))))
            .exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}
