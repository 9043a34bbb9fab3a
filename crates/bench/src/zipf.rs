//! Key choice: uniform, or Zipfian over ranks with the ranks scrambled over the key space.
//!
//! # The Zipf sampler
//! Rank `k` (0-based) of `n` has probability `(k + 1)^-θ / H(n, θ)` with
//! `H(n, θ) = Σ_{i=1..n} i^-θ`. [`Zipf`] precomputes the cumulative distribution over all
//! `n` ranks once (`n` `f64`s: 80 MB for 10 M keys) and draws a rank by inverting it: a
//! uniform `u ∈ [0, 1)` maps to the first rank whose cumulative probability exceeds `u`,
//! found by binary search. This is exact for every θ ≥ 0 (θ = 0 is uniform, θ = 1 and θ > 1
//! need no special case), unlike YCSB's closed-form generator (Gray et al.), whose
//! approximation only holds for θ < 1. Its only error is `f64` rounding of the table.
//!
//! # Scrambling
//! Rank 0 is the hottest key. [`KeyChooser`] maps ranks to key ids through a fixed random
//! permutation of `0..n` (drawn from the seed), so the hot keys are spread over the key
//! space, and thus over workers and hash slots, like YCSB's scrambled zipfian.

use crate::args::Distribution;

/// Zipf distribution over ranks `0..n` with exponent θ ≥ 0.
#[derive(Debug, Clone)]
pub struct Zipf {
    /// `cdf[k]` = P(rank ≤ k); the last entry is exactly 1.
    cdf: Vec<f64>,
}

impl Zipf {
    /// The distribution over `n ≥ 1` ranks with exponent `theta ≥ 0`.
    pub fn new(n: usize, theta: f64) -> Zipf {
        let n = n.max(1);
        let mut cdf = Vec::with_capacity(n);
        let mut sum = 0.0f64;
        for k in 1..=n {
            sum += if theta == 0.0 {
                1.0
            } else {
                (k as f64).powf(-theta)
            };
            cdf.push(sum);
        }
        // Dividing every entry by the same positive number keeps the table non-decreasing.
        for c in &mut cdf {
            *c /= sum;
        }
        if let Some(last) = cdf.last_mut() {
            *last = 1.0;
        }
        Zipf { cdf }
    }

    /// Number of ranks.
    pub fn len(&self) -> usize {
        self.cdf.len()
    }

    /// True if there are no ranks (never: `new` makes at least one).
    pub fn is_empty(&self) -> bool {
        self.cdf.is_empty()
    }

    /// Probability of rank `k` (0-based).
    pub fn pmf(&self, k: usize) -> f64 {
        match k {
            0 => self.cdf.first().copied().unwrap_or(0.0),
            _ => match (self.cdf.get(k), self.cdf.get(k - 1)) {
                (Some(c), Some(p)) => c - p,
                _ => 0.0,
            },
        }
    }

    /// Draws a rank in `0..len()`.
    #[inline]
    pub fn sample(&self, rng: &mut fastrand::Rng) -> usize {
        let u = rng.f64();
        // The first rank whose cumulative probability exceeds u; u < 1 = the last entry.
        self.cdf
            .partition_point(|&c| c <= u)
            .min(self.cdf.len() - 1)
    }
}

/// Chooses key ids according to the run's distribution.
#[derive(Debug, Clone)]
pub enum KeyChooser {
    /// Every id in `0..n` equally likely.
    Uniform {
        /// Number of keys.
        n: u32,
    },
    /// Zipfian ranks mapped to ids by a fixed permutation.
    Zipf {
        /// The rank distribution.
        zipf: Zipf,
        /// `perm[rank]` = key id.
        perm: Vec<u32>,
    },
}

impl KeyChooser {
    /// A chooser over `n ≥ 1` keys; `seed` fixes the scrambling permutation.
    pub fn new(n: u32, distribution: Distribution, theta: f64, seed: u64) -> KeyChooser {
        let n = n.max(1);
        match distribution {
            Distribution::Uniform => KeyChooser::Uniform { n },
            Distribution::Zipf => {
                let mut perm: Vec<u32> = (0..n).collect();
                let mut rng = fastrand::Rng::with_seed(seed ^ 0x7065_726d_7574_6521);
                rng.shuffle(&mut perm);
                KeyChooser::Zipf {
                    zipf: Zipf::new(n as usize, theta),
                    perm,
                }
            }
        }
    }

    /// Draws a key id.
    #[inline]
    pub fn next(&self, rng: &mut fastrand::Rng) -> u32 {
        match self {
            KeyChooser::Uniform { n } => rng.u32(..*n),
            KeyChooser::Zipf { zipf, perm } => perm[zipf.sample(rng)],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frequencies of each rank over `samples` draws.
    fn histogram(z: &Zipf, samples: usize, seed: u64) -> Vec<usize> {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut counts = vec![0usize; z.len()];
        for _ in 0..samples {
            counts[z.sample(&mut rng)] += 1;
        }
        counts
    }

    /// Theoretical pmf computed independently of the table.
    fn pmf(n: usize, theta: f64, k: usize) -> f64 {
        let h: f64 = (1..=n).map(|i| (i as f64).powf(-theta)).sum();
        ((k + 1) as f64).powf(-theta) / h
    }

    #[test]
    fn theta_zero_is_uniform() {
        let z = Zipf::new(100, 0.0);
        for k in 0..100 {
            assert!((z.pmf(k) - 0.01).abs() < 1e-12);
        }
        let counts = histogram(&z, 200_000, 1);
        for (k, &c) in counts.iter().enumerate() {
            // Expected 2000 per rank, standard deviation ≈ 45.
            assert!((c as f64 - 2000.0).abs() < 250.0, "rank {k}: {c}");
        }
    }

    #[test]
    fn empirical_frequencies_match_the_pmf() {
        let samples = 2_000_000;
        for (n, theta, ranks) in [
            (1000, 0.99, 8),
            (1000, 4.0, 4),
            (50, 1.0, 10),
            (10_000, 0.5, 5),
        ] {
            let z = Zipf::new(n, theta);
            let counts = histogram(&z, samples, 7);
            for (k, &count) in counts.iter().enumerate().take(ranks) {
                let expected = pmf(n, theta, k);
                assert!((z.pmf(k) - expected).abs() < 1e-9);
                let got = count as f64 / samples as f64;
                let rel = (got - expected).abs() / expected;
                assert!(rel < 0.04, "n={n} θ={theta} rank {k}: {got} vs {expected}");
            }
            assert_eq!(counts.iter().sum::<usize>(), samples);
        }
        // θ = 4 is extremely skewed: rank 0 gets 1/ζ(4) ≈ 92.4%.
        assert!((Zipf::new(1000, 4.0).pmf(0) - 90.0 / std::f64::consts::PI.powi(4)).abs() < 1e-6);
    }

    #[test]
    fn samples_in_range_for_any_theta() {
        let mut rng = fastrand::Rng::with_seed(3);
        for theta in [0.0, 0.2, 0.99, 1.0, 1.5, 4.0, 10.0, 100.0] {
            for n in [1, 2, 7, 1000] {
                let z = Zipf::new(n, theta);
                assert!((0..5000).all(|_| z.sample(&mut rng) < n));
                // The table is a valid distribution.
                let total: f64 = (0..n).map(|k| z.pmf(k)).sum();
                assert!((total - 1.0).abs() < 1e-9);
                assert!((0..n).all(|k| z.pmf(k) >= 0.0));
            }
        }
    }

    #[test]
    fn deterministic_for_a_seed() {
        for dist in [Distribution::Uniform, Distribution::Zipf] {
            let draw = |seed: u64, perm_seed: u64| {
                let chooser = KeyChooser::new(10_000, dist, 0.99, perm_seed);
                let mut rng = fastrand::Rng::with_seed(seed);
                (0..1000)
                    .map(|_| chooser.next(&mut rng))
                    .collect::<Vec<_>>()
            };
            assert_eq!(draw(5, 9), draw(5, 9));
            assert_ne!(draw(5, 9), draw(6, 9));
            assert!(draw(5, 9).iter().all(|&k| k < 10_000));
        }
    }

    #[test]
    fn scrambling_spreads_hot_keys() {
        let chooser = KeyChooser::new(100_000, Distribution::Zipf, 0.99, 1);
        let KeyChooser::Zipf { perm, .. } = &chooser else {
            panic!("zipf chooser");
        };
        let mut sorted = perm.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..100_000).collect::<Vec<u32>>());
        // The ten hottest ranks are not the ten first ids.
        assert!(perm[..10].iter().filter(|&&id| id < 10).count() < 3);
        // The hottest id is drawn about pmf(0) of the time.
        let mut rng = fastrand::Rng::with_seed(2);
        let hits = (0..100_000)
            .filter(|_| chooser.next(&mut rng) == perm[0])
            .count();
        let expected = pmf(100_000, 0.99, 0) * 100_000.0;
        assert!((hits as f64 - expected).abs() / expected < 0.05);
    }
}
