//! The one seeded generator: SplitMix64 and its finaliser, and the draws the
//! simulation needs. Its own code, so a seed gives the same stream on every
//! machine and in every release.

/// SplitMix64's increment.
pub const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64's finaliser: spreads the bits of a hash or a counter.
pub fn finalise(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// One SplitMix64 step from `state`: the output for the state after it.
pub fn splitmix64(state: u64) -> u64 {
    finalise(state.wrapping_add(GOLDEN_GAMMA))
}

/// FNV-1a of `bytes`: a fixed hash of a text, the same on every machine and
/// in every release (std's and foldhash's hashers promise neither).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// FNV-1a of several texts, each followed by a separator byte, so ("ab",
/// "c") and ("a", "bc") differ.
pub fn fnv1a_parts(parts: &[&[u8]]) -> u64 {
    parts.iter().fold(0xcbf2_9ce4_8422_2325u64, |hash, part| {
        (fnv1a_continue(hash, part) ^ 0xff).wrapping_mul(0x0100_0000_01b3)
    })
}

fn fnv1a_continue(hash: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(hash, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A uniform number in [0, 1) from the top 53 bits of `bits`.
pub fn unit_of(bits: u64) -> f64 {
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

/// SplitMix64, with uniform, normal, gamma and beta draws.
#[derive(Debug, Clone)]
pub struct Random {
    state: u64,
    spare_normal: Option<f64>,
}

impl Random {
    pub fn new(seed: u64) -> Random {
        Random {
            state: seed ^ 0x5851_f42d_4c95_7f2d,
            spare_normal: None,
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        let output = splitmix64(self.state);
        self.state = self.state.wrapping_add(GOLDEN_GAMMA);
        output
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        unit_of(self.next_u64())
    }

    pub fn chance(&mut self, probability: f64) -> bool {
        self.unit() < probability
    }

    /// Standard normal, by the Box–Muller transform.
    pub fn normal(&mut self) -> f64 {
        if let Some(spare) = self.spare_normal.take() {
            return spare;
        }
        let radius = (-2.0 * (1.0 - self.unit()).ln()).sqrt();
        let angle = std::f64::consts::TAU * self.unit();
        self.spare_normal = Some(radius * angle.sin());
        radius * angle.cos()
    }

    /// Gamma(shape, 1), by Marsaglia and Tsang's method (boosted below 1).
    pub fn gamma(&mut self, shape: f64) -> f64 {
        if shape < 1.0 {
            let boost = self.unit().powf(1.0 / shape);
            return self.gamma(shape + 1.0) * boost;
        }
        let d = shape - 1.0 / 3.0;
        let c = 1.0 / (9.0 * d).sqrt();
        loop {
            let x = self.normal();
            let v = (1.0 + c * x).powi(3);
            if v <= 0.0 {
                continue;
            }
            let u = 1.0 - self.unit();
            if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
                return d * v;
            }
        }
    }

    /// Beta(alpha, beta).
    pub fn beta(&mut self, alpha: f64, beta: f64) -> f64 {
        let x = self.gamma(alpha);
        let y = self.gamma(beta);
        x / (x + y)
    }
}

#[cfg(test)]
mod tests {
    use super::Random;

    fn moments(draws: impl Iterator<Item = f64>) -> (f64, f64) {
        let values: Vec<f64> = draws.collect();
        let n = values.len() as f64;
        let mean = values.iter().sum::<f64>() / n;
        let variance = values
            .iter()
            .map(|value| (value - mean).powi(2))
            .sum::<f64>()
            / n;
        (mean, variance)
    }

    #[test]
    fn beta_draws_have_the_beta_moments() {
        let mut random = Random::new(1);
        for (alpha, beta) in [(2.0, 3.0), (0.5, 0.5), (5.0, 1.5)] {
            let (mean, variance) = moments((0..200_000).map(|_| random.beta(alpha, beta)));
            let expected_mean = alpha / (alpha + beta);
            let expected_variance = alpha * beta / ((alpha + beta).powi(2) * (alpha + beta + 1.0));
            assert!(
                (mean - expected_mean).abs() < 0.003,
                "Beta({alpha}, {beta}) mean {mean}"
            );
            assert!(
                (variance - expected_variance).abs() < 0.002,
                "Beta({alpha}, {beta}) variance {variance}"
            );
        }
    }

    #[test]
    fn normal_draws_are_standard() {
        let mut random = Random::new(2);
        let (mean, variance) = moments((0..200_000).map(|_| random.normal()));
        assert!(
            mean.abs() < 0.01 && (variance - 1.0).abs() < 0.01,
            "{mean} {variance}"
        );
    }

    #[test]
    fn a_seed_fixes_the_stream() {
        let draw = |seed| {
            (0..5)
                .map(|_| Random::new(seed).next_u64())
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(3), draw(3));
        assert_ne!(Random::new(3).next_u64(), Random::new(4).next_u64());
    }
}
