//! A histogram the server's threads observe into without a lock (one atomic per bucket), read
//! at scrape time: the request duration and the request and response sizes.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use prometheus_client::{
    encoding::{EncodeMetric, MetricEncoder, NoLabelSet},
    metrics::{MetricType, TypedMetric},
};

pub struct AtomicHistogram {
    /// Upper bounds, increasing; a last bucket counts everything above.
    bounds: &'static [f64],
    counts: Vec<AtomicU64>,
    /// The sum of the observations, in `unit`s.
    sum: AtomicU64,
    /// What one unit of `sum` is worth (1e-9 for nanoseconds counted as seconds).
    unit: f64,
}

impl AtomicHistogram {
    /// A histogram with these bounds, whose observations are counted in `unit`s.
    pub fn new(bounds: &'static [f64], unit: f64) -> Self {
        Self {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
            unit,
        }
    }

    /// Counts one observation of `units` units.
    pub fn observe(&self, units: u64) {
        let value = units as f64 * self.unit;
        let bucket = self
            .bounds
            .iter()
            .position(|bound| value <= *bound)
            .unwrap_or(self.bounds.len());
        self.counts[bucket].fetch_add(1, Relaxed);
        self.sum.fetch_add(units, Relaxed);
    }

    /// What it holds now, to encode.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let buckets: Vec<(f64, u64)> = self
            .bounds
            .iter()
            .copied()
            .chain([f64::INFINITY])
            .zip(self.counts.iter().map(|c| c.load(Relaxed)))
            .collect();
        HistogramSnapshot {
            count: buckets.iter().map(|(_, n)| n).sum(),
            sum: self.sum.load(Relaxed) as f64 * self.unit,
            buckets,
        }
    }
}

/// A histogram's values at one moment.
#[derive(Debug)]
pub struct HistogramSnapshot {
    sum: f64,
    count: u64,
    /// (upper bound, observations in this bucket alone).
    buckets: Vec<(f64, u64)>,
}

impl TypedMetric for HistogramSnapshot {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for HistogramSnapshot {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_histogram::<NoLabelSet>(self.sum, self.count, &self.buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_their_bucket_and_the_sum() {
        static BOUNDS: [f64; 2] = [0.001, 0.01];
        let h = AtomicHistogram::new(&BOUNDS, 1e-9);
        h.observe(500_000); // 0.5 ms
        h.observe(1_000_000); // 1 ms: on the bound, in it
        h.observe(20_000_000); // 20 ms
        let s = h.snapshot();
        assert_eq!(s.count, 3);
        assert_eq!(s.buckets, vec![(0.001, 2), (0.01, 0), (f64::INFINITY, 1)]);
        assert!((s.sum - 0.0215).abs() < 1e-9);
    }
}
