//! Per-thread answer cache: the answer to a query depends only on its bytes (apart from the ID)
//! and the table, so an answer computed once for a table is reused until the table changes.
//! Load balancers ask the same few questions every second; a hit costs a hash lookup and a copy
//! of the answer's bytes (and, in a rotating zone, a rotation of its address records by the new
//! ID: see `rotation`), whatever the number of records.
//!
//! Bounded twice: entries per thread, and bytes over all threads together (queries padded or
//! with randomised case against a large set cannot grow the caches toward the pod's memory
//! limit: a thread that would pass the global budget empties its own cache first).

use std::{
    cell::RefCell,
    sync::atomic::{AtomicUsize, Ordering::Relaxed},
};

use rustc_hash::FxHashMap;

use hostport_dns_core::{answer::Answer, dns::message::Transport};

/// Entries per thread; the cache is emptied when it fills up (a sign of random questions, for
/// which caching does not help anyway).
const CAPACITY: usize = 4096;
/// Queries longer than this are not cached (nothing a load balancer sends).
const MAX_QUERY: usize = 512;
/// Bytes all threads' caches may hold together (keys, answers and the map's overhead).
pub const MAX_BYTES: usize = 16 << 20;
/// What an entry costs beyond its key and answer bytes (map slot, vector headers).
const ENTRY_OVERHEAD: usize = 96;

/// Bytes held by every thread's cache.
static CACHED_BYTES: AtomicUsize = AtomicUsize::new(0);

#[derive(Default)]
struct Cache {
    generation: u64,
    /// (transport, query without its ID) → answer without its ID.
    answers: FxHashMap<(bool, Vec<u8>), Answer>,
    /// Bytes this thread's entries hold (its share of [`CACHED_BYTES`]).
    bytes: usize,
}

impl Cache {
    fn clear(&mut self) {
        self.answers.clear();
        CACHED_BYTES.fetch_sub(self.bytes, Relaxed);
        self.bytes = 0;
    }

    /// Keeps `answer` unless that would pass `max_bytes` over all threads.
    fn insert(&mut self, key: (bool, Vec<u8>), answer: Answer, max_bytes: usize) {
        let cost = key.1.len() + answer.bytes.len() + ENTRY_OVERHEAD;
        if self.answers.len() >= CAPACITY || CACHED_BYTES.load(Relaxed) + cost > max_bytes {
            self.clear();
        }
        if CACHED_BYTES.load(Relaxed) + cost > max_bytes {
            // Other threads hold the budget: answer without caching.
            return;
        }
        CACHED_BYTES.fetch_add(cost, Relaxed);
        self.bytes += cost;
        self.answers.insert(key, answer);
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        CACHED_BYTES.fetch_sub(self.bytes, Relaxed);
    }
}

/// Bytes every thread's cache holds now.
pub fn cached_bytes() -> usize {
    CACHED_BYTES.load(Relaxed)
}

thread_local! {
    static CACHE: RefCell<Cache> = RefCell::new(Cache::default());
}

/// The cached answer to `query` for table `generation`, or `compute`'s (cached if it has one).
pub fn lookup_or_insert(
    generation: u64,
    query: &[u8],
    transport: Transport,
    compute: impl FnOnce() -> Option<Answer>,
) -> Option<Answer> {
    lookup_or_insert_within(generation, query, transport, MAX_BYTES, compute)
}

fn lookup_or_insert_within(
    generation: u64,
    query: &[u8],
    transport: Transport,
    max_bytes: usize,
    compute: impl FnOnce() -> Option<Answer>,
) -> Option<Answer> {
    if query.len() < 2 || query.len() > MAX_QUERY {
        return compute();
    }
    CACHE.with_borrow_mut(|cache| {
        if cache.generation != generation {
            cache.clear();
            cache.generation = generation;
        }
        let key = (transport == Transport::Tcp, query[2..].to_vec());
        let id = u16::from_be_bytes([query[0], query[1]]);
        if let Some(cached) = cache.answers.get(&key) {
            let mut answer = cached.clone();
            answer.bytes[..2].copy_from_slice(&query[..2]);
            // Kept in the order of ID 0: rotated for this one.
            if let Some(rotation) = answer.rotation {
                rotation.rotate(&mut answer.bytes, 0, rotation.first_for(id));
            }
            return Some(answer);
        }
        let answer = compute()?;
        if answer.bytes.len() >= 2 && !answer.personal {
            let mut kept = answer.clone();
            if let Some(rotation) = kept.rotation {
                rotation.rotate(&mut kept.bytes, rotation.first_for(id), 0);
            }
            cache.insert(key, kept, max_bytes);
        }
        Some(answer)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::op::ResponseCode;

    fn answer(bytes: &[u8]) -> Answer {
        Answer::new(bytes.to_vec(), ResponseCode::NoError, None, false)
    }

    #[test]
    fn a_cached_answer_gets_the_new_queries_id_and_dies_with_its_table() {
        let computed = std::cell::Cell::new(0);
        let compute = |bytes: &'static [u8]| {
            computed.set(computed.get() + 1);
            Some(answer(bytes))
        };
        let first =
            lookup_or_insert(1, &[0, 1, 9, 9], Transport::Udp, || compute(&[0, 1, 7, 7])).unwrap();
        assert_eq!(first.bytes, [0, 1, 7, 7]);
        let again =
            lookup_or_insert(1, &[0, 2, 9, 9], Transport::Udp, || compute(&[0, 0, 8, 8])).unwrap();
        assert_eq!(
            again.bytes,
            [0, 2, 7, 7],
            "cached, with the second query's ID"
        );
        assert_eq!(computed.get(), 1);
        let tcp =
            lookup_or_insert(1, &[0, 2, 9, 9], Transport::Tcp, || compute(&[0, 2, 6, 6])).unwrap();
        assert_eq!(
            tcp.bytes,
            [0, 2, 6, 6],
            "UDP and TCP answers are cached apart"
        );
        let new_table =
            lookup_or_insert(2, &[0, 3, 9, 9], Transport::Udp, || compute(&[0, 3, 5, 5])).unwrap();
        assert_eq!(new_table.bytes, [0, 3, 5, 5], "a new table computes again");
        assert_eq!(computed.get(), 3);
    }

    #[test]
    fn the_caches_never_hold_more_bytes_than_the_budget() {
        // On a thread of its own: the budget is over every thread's cache.
        std::thread::spawn(|| {
            let budget = 64 * 1024;
            let start = cached_bytes();
            let mut peak = 0;
            for i in 0..10_000u32 {
                // Distinct queries (a name in random case, say), each with a 400-byte answer.
                let mut query = vec![0, 0];
                query.extend_from_slice(&i.to_be_bytes());
                let answered =
                    lookup_or_insert_within(1, &query, Transport::Udp, start + budget, || {
                        Some(answer(&[0u8; 400]))
                    });
                assert_eq!(
                    answered.map(|a| a.bytes.len()),
                    Some(400),
                    "answered all the same"
                );
                peak = peak.max(cached_bytes().saturating_sub(start));
            }
            assert!(peak <= budget, "peak {peak} over the budget {budget}");
            assert!(peak > budget / 2, "the cache was used ({peak})");
        })
        .join()
        .expect("the thread");
    }
}
