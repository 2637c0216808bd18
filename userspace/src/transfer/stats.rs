//! Counters of transfers and NOTIFYs, read by the metrics collector at scrape time.

use std::{collections::BTreeMap, sync::Mutex};

use super::secondaries::Secondaries;

/// How a transfer request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    /// The whole zone, as asked (AXFR).
    Axfr,
    /// The differences since the client's serial.
    Ixfr,
    /// IXFR from a serial older than every version kept: the whole zone.
    AxfrFallback,
    /// IXFR from the current serial (or over UDP): the SOA alone.
    UpToDate,
    /// Outside the ACL, without the key it asks for, or AXFR over UDP.
    Refused,
    /// A TSIG that does not verify (BADKEY, BADSIG, BADTIME).
    BadTsig,
    /// A zone not served here.
    NotAuth,
    /// Before the first table.
    NotReady,
    /// An IXFR request without the client's SOA.
    Malformed,
}

impl Outcome {
    pub fn label(self) -> &'static str {
        match self {
            Self::Axfr => "axfr",
            Self::Ixfr => "ixfr",
            Self::AxfrFallback => "axfr_fallback",
            Self::UpToDate => "up_to_date",
            Self::Refused => "refused",
            Self::BadTsig => "bad_tsig",
            Self::NotAuth => "notauth",
            Self::NotReady => "not_ready",
            Self::Malformed => "malformed",
        }
    }
}

/// How a NOTIFY to one secondary ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum NotifyOutcome {
    /// Answered NOERROR.
    Acknowledged,
    /// Sent again after no answer or an error answer.
    Retried,
    /// Given up after the last retry.
    Failed,
}

impl NotifyOutcome {
    pub fn label(self) -> &'static str {
        match self {
            Self::Acknowledged => "acknowledged",
            Self::Retried => "retried",
            Self::Failed => "failed",
        }
    }
}

#[derive(Default)]
pub struct TransferStats {
    requests: Mutex<BTreeMap<(&'static str, Outcome), u64>>,
    bytes: Mutex<BTreeMap<&'static str, u64>>,
    notifies: Mutex<BTreeMap<NotifyOutcome, u64>>,
    /// The serial each secondary holds of each zone.
    pub secondaries: Secondaries,
}

impl TransferStats {
    pub fn count(&self, kind: &'static str, outcome: Outcome) {
        *lock(&self.requests).entry((kind, outcome)).or_default() += 1;
    }

    pub fn sent(&self, kind: &'static str, bytes: usize) {
        *lock(&self.bytes).entry(kind).or_default() += bytes as u64;
    }

    pub fn notified(&self, outcome: NotifyOutcome) {
        *lock(&self.notifies).entry(outcome).or_default() += 1;
    }

    /// (kind, outcome, count) of every request so far.
    pub fn requests(&self) -> Vec<(&'static str, &'static str, u64)> {
        lock(&self.requests)
            .iter()
            .map(|((kind, outcome), n)| (*kind, outcome.label(), *n))
            .collect()
    }

    pub fn bytes(&self) -> Vec<(&'static str, u64)> {
        lock(&self.bytes).iter().map(|(k, n)| (*k, *n)).collect()
    }

    pub fn notifies(&self) -> Vec<(&'static str, u64)> {
        lock(&self.notifies)
            .iter()
            .map(|(o, n)| (o.label(), *n))
            .collect()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
