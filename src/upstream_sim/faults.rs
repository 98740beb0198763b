//! Fault injection: each request draws at most one fault, deterministically
//! from the seed and the request's number, at the profile's rates.

use serde::Deserialize;

use crate::stats::random::{finalise, unit_of};

/// Rates in [0, 1] of each fault; they must sum to at most 1.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultProfile {
    #[serde(default)]
    pub rate_limit: f64,
    /// Seconds in the 429's Retry-After header.
    #[serde(default = "default_retry_after")]
    pub retry_after_s: u64,
    #[serde(default)]
    pub server_error: f64,
    #[serde(default)]
    pub unavailable: f64,
    /// The connection drops after the first chunk.
    #[serde(default)]
    pub reset: f64,
    #[serde(default)]
    pub slow_first_token: f64,
    #[serde(default = "default_slow_ms")]
    pub slow_first_token_ms: u64,
    #[serde(default)]
    pub stall: f64,
    #[serde(default = "default_slow_ms")]
    pub stall_ms: u64,
    /// The stream ends without a finish reason.
    #[serde(default)]
    pub cut_stream: f64,
    #[serde(default)]
    pub malformed_chunk: f64,
    #[serde(default)]
    pub missing_usage: f64,
    /// A 400 that no retry can fix.
    #[serde(default)]
    pub bad_request: f64,
}

fn default_retry_after() -> u64 {
    1
}

fn default_slow_ms() -> u64 {
    5_000
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Fault {
    RateLimit,
    ServerError,
    Unavailable,
    Reset,
    SlowFirstToken,
    Stall,
    CutStream,
    MalformedChunk,
    MissingUsage,
    BadRequest,
}

impl FaultProfile {
    pub fn load(path: &std::path::Path) -> anyhow::Result<FaultProfile> {
        let text = std::fs::read_to_string(path).map_err(|error| {
            anyhow::anyhow!("{}: cannot read (--faults): {error}", path.display())
        })?;
        let profile: FaultProfile = toml::from_str(&text).map_err(|error| {
            anyhow::anyhow!(
                "{}: {}",
                path.display(),
                crate::toml_message::one_line(&error.to_string())
            )
        })?;
        let total: f64 = profile.rates().iter().map(|(_, rate)| rate).sum();
        if profile
            .rates()
            .iter()
            .any(|(_, rate)| !(0.0..=1.0).contains(rate))
            || total > 1.0 + 1e-9
        {
            anyhow::bail!(
                "{}: fault rates must be in [0, 1] and sum to at most 1, got {total}",
                path.display()
            );
        }
        Ok(profile)
    }

    fn rates(&self) -> [(Fault, f64); 10] {
        [
            (Fault::RateLimit, self.rate_limit),
            (Fault::ServerError, self.server_error),
            (Fault::Unavailable, self.unavailable),
            (Fault::Reset, self.reset),
            (Fault::SlowFirstToken, self.slow_first_token),
            (Fault::Stall, self.stall),
            (Fault::CutStream, self.cut_stream),
            (Fault::MalformedChunk, self.malformed_chunk),
            (Fault::MissingUsage, self.missing_usage),
            (Fault::BadRequest, self.bad_request),
        ]
    }

    /// The fault of request number `request`, if any.
    pub fn draw(&self, seed: u64, request: u64) -> Option<Fault> {
        let unit = request_unit(seed, request, 0);
        let mut cumulative = 0.0;
        for (fault, rate) in self.rates() {
            cumulative += rate;
            if unit < cumulative {
                return Some(fault);
            }
        }
        None
    }
}

/// A number in [0, 1) fixed by the seed, a request's number and a salt that
/// tells apart the draws made for one request (SplitMix64's finaliser).
pub(super) fn request_unit(seed: u64, request: u64, salt: u64) -> f64 {
    unit_of(finalise(
        seed ^ request.wrapping_mul(0x9e37_79b9_7f4a_7c15)
            ^ salt.wrapping_mul(0xd1b5_4a32_d192_ed03),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_come_at_their_rates() {
        let profile = FaultProfile {
            rate_limit: 0.1,
            cut_stream: 0.05,
            ..FaultProfile::default()
        };
        let draws: Vec<Option<Fault>> = (0..20_000)
            .map(|request| profile.draw(7, request))
            .collect();
        let share =
            |fault| draws.iter().filter(|draw| **draw == Some(fault)).count() as f64 / 20_000.0;
        assert!((share(Fault::RateLimit) - 0.1).abs() < 0.01);
        assert!((share(Fault::CutStream) - 0.05).abs() < 0.01);
        assert_eq!(share(Fault::Reset), 0.0);
        assert_eq!(profile.draw(7, 12), profile.draw(7, 12));
    }
}
