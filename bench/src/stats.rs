//! Latency samples and their summary: nearest-rank percentiles, mean, throughput.

use std::time::Duration;

/// A summary of one measured operation.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Summary {
    pub calls: usize,
    #[serde(deserialize_with = "nan_if_null")]
    pub p50_ms: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub p99_ms: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub mean_ms: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub max_ms: f64,
    /// Completed calls per second of wall time (all clients together).
    #[serde(deserialize_with = "nan_if_null")]
    pub per_sec: f64,
    /// Calls that failed (transport error, timeout or an `isError` result); not in the latencies.
    pub errors: usize,
    /// The first failure's message, when any call failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
}

/// JSON has no NaN: serde_json writes it as `null`, read back here as NaN ("not measured").
fn nan_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    use serde::Deserialize;
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// The nearest-rank percentile `p` (0–100) of sorted samples.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Summarizes latencies measured over `wall` of wall-clock time.
pub fn summarize(latencies: &[Duration], wall: Duration, errors: usize) -> Summary {
    let mut ms: Vec<f64> = latencies.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    let calls = ms.len();
    let mean = if calls == 0 {
        f64::NAN
    } else {
        ms.iter().sum::<f64>() / calls as f64
    };
    let secs = wall.as_secs_f64();
    Summary {
        calls,
        p50_ms: percentile(&ms, 50.0),
        p99_ms: percentile(&ms, 99.0),
        mean_ms: mean,
        max_ms: ms.last().copied().unwrap_or(f64::NAN),
        per_sec: if secs > 0.0 { calls as f64 / secs } else { f64::NAN },
        errors,
        first_error: None,
    }
}

/// How many timed calls to make, given one warm-up call's duration: as many as fit `budget`,
/// at least `min` and at most `max`.
pub fn iterations(one: Duration, budget: Duration, min: usize, max: usize) -> usize {
    let one = one.as_secs_f64().max(1e-6);
    let fit = (budget.as_secs_f64() / one) as usize;
    fit.clamp(min, max.max(min))
}

/// A number of milliseconds, printed with sensible precision.
pub fn ms(v: f64) -> String {
    if v.is_nan() {
        "—".to_owned()
    } else if v < 1.0 {
        format!("{v:.3}")
    } else if v < 100.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.0}")
    }
}

/// A rate, printed with sensible precision.
pub fn rate(v: f64) -> String {
    if v.is_nan() {
        "—".to_owned()
    } else if v < 10.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&v, 100.0), 100.0);
        assert_eq!(percentile(&[3.0], 99.0), 3.0);
        assert!(percentile(&[], 50.0).is_nan());
        let small = [1.0, 2.0, 3.0];
        assert_eq!(percentile(&small, 50.0), 2.0);
        assert_eq!(percentile(&small, 99.0), 3.0);
    }

    #[test]
    fn summary_of_known_samples() {
        let lat: Vec<Duration> = (1..=10).map(Duration::from_millis).collect();
        let s = summarize(&lat, Duration::from_secs(1), 2);
        assert_eq!(s.calls, 10);
        assert!((s.p50_ms - 5.0).abs() < 1e-9);
        assert!((s.p99_ms - 10.0).abs() < 1e-9);
        assert!((s.mean_ms - 5.5).abs() < 1e-9);
        assert!((s.per_sec - 10.0).abs() < 1e-9);
        assert_eq!(s.errors, 2);
    }

    #[test]
    fn iteration_budget_is_clamped() {
        let b = Duration::from_secs(5);
        assert_eq!(iterations(Duration::from_millis(1), b, 5, 1000), 1000);
        assert_eq!(iterations(Duration::from_millis(100), b, 5, 1000), 50);
        assert_eq!(iterations(Duration::from_secs(10), b, 3, 1000), 3);
    }
}
