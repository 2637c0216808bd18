//! Per-thread answer cache: the answer to a query depends only on its bytes (apart from the ID)
//! and the table, so an answer computed once for a table is reused until the table changes.
//! Load balancers ask the same few questions every second; a hit costs a hash lookup and a copy.

use std::cell::RefCell;

use rustc_hash::FxHashMap;

use crate::server::answer::{Answer, Transport};

/// Entries per thread; the cache is emptied when it fills up (a sign of random questions, for
/// which caching does not help anyway).
const CAPACITY: usize = 4096;
/// Queries longer than this are not cached (nothing a load balancer sends).
const MAX_QUERY: usize = 512;

#[derive(Default)]
struct Cache {
    generation: u64,
    /// (transport, query without its ID) → answer without its ID.
    answers: FxHashMap<(bool, Vec<u8>), Answer>,
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
    if query.len() < 2 || query.len() > MAX_QUERY {
        return compute();
    }
    CACHE.with_borrow_mut(|cache| {
        if cache.generation != generation {
            cache.answers.clear();
            cache.generation = generation;
        }
        let key = (transport == Transport::Tcp, query[2..].to_vec());
        if let Some(cached) = cache.answers.get(&key) {
            let mut answer = cached.clone();
            answer.bytes[..2].copy_from_slice(&query[..2]);
            return Some(answer);
        }
        let answer = compute()?;
        if answer.bytes.len() >= 2 {
            if cache.answers.len() >= CAPACITY {
                cache.answers.clear();
            }
            cache.answers.insert(key, answer.clone());
        }
        Some(answer)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::op::ResponseCode;

    fn answer(bytes: &[u8]) -> Answer {
        Answer {
            bytes: bytes.to_vec(),
            rcode: ResponseCode::NoError,
            qtype: None,
            truncated: false,
        }
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
}
