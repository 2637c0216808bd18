//! What the probes say of each server of one output: a pure state machine, no I/O. A server
//! starts in the answer (the EndpointSlice lists it: the API server's own lease reconciler
//! vouches for it until the probes say otherwise); `failures` failed probes in a row take it
//! out, `successes` successful ones in a row bring it back. A server no longer listed is
//! forgotten (listed again, it starts afresh).

use std::{
    collections::{BTreeMap, BTreeSet},
    net::{IpAddr, SocketAddr},
};

/// One server's standing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Standing {
    /// Left out of the answer.
    down: bool,
    /// Results in a row that speak against the current standing (failures while in, successes
    /// while out).
    against: u32,
}

/// What a probe's result did to its server's standing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Turn {
    /// No change.
    Stays,
    /// Out of the answer now.
    WentDown,
    /// Back in the answer.
    CameBack,
}

/// The standing of every server of an output.
#[derive(Debug)]
pub struct Tracker {
    failures: u32,
    successes: u32,
    servers: BTreeMap<SocketAddr, Standing>,
}

impl Tracker {
    /// Takes a server out after `failures` failed probes in a row, back after `successes`
    /// successful ones (each at least 1).
    pub fn new(failures: u32, successes: u32) -> Self {
        Self {
            failures: failures.max(1),
            successes: successes.max(1),
            servers: BTreeMap::new(),
        }
    }

    /// Follows the servers listed now: new ones start in the answer, those no longer listed are
    /// forgotten (and returned).
    pub fn follow(&mut self, listed: &[SocketAddr]) -> Vec<SocketAddr> {
        let listed: BTreeSet<SocketAddr> = listed.iter().copied().collect();
        let gone: Vec<SocketAddr> = self
            .servers
            .keys()
            .filter(|s| !listed.contains(s))
            .copied()
            .collect();
        for server in &gone {
            self.servers.remove(server);
        }
        for server in listed {
            self.servers.entry(server).or_default();
        }
        gone
    }

    /// Counts one probe of `server` (a server not listed is ignored).
    pub fn observe(&mut self, server: SocketAddr, success: bool) -> Turn {
        let Some(standing) = self.servers.get_mut(&server) else {
            return Turn::Stays;
        };
        // A result that agrees with the standing ends any run against it.
        if success != standing.down {
            standing.against = 0;
            return Turn::Stays;
        }
        standing.against += 1;
        let needed = if standing.down {
            self.successes
        } else {
            self.failures
        };
        if standing.against < needed {
            return Turn::Stays;
        }
        standing.down = !standing.down;
        standing.against = 0;
        if standing.down {
            Turn::WentDown
        } else {
            Turn::CameBack
        }
    }

    /// Whether `server` is in the answer (an unknown server is).
    pub fn is_up(&self, server: SocketAddr) -> bool {
        self.servers.get(&server).is_none_or(|s| !s.down)
    }

    /// The addresses of the servers out of the answer.
    pub fn down(&self) -> BTreeSet<IpAddr> {
        self.servers
            .iter()
            .filter(|(_, s)| s.down)
            .map(|(server, _)| server.ip())
            .collect()
    }
}

/// The addresses to answer with: those of the servers in the answer (`healthy`); when the
/// probes would leave nothing, all of them (`all`, asked for only then), never an empty answer
/// because of probes alone. The flag says that every server fails its probes.
pub fn never_empty(healthy: Vec<IpAddr>, all: impl FnOnce() -> Vec<IpAddr>) -> (Vec<IpAddr>, bool) {
    if !healthy.is_empty() {
        return (healthy, false);
    }
    let all = all();
    let all_down = !all.is_empty();
    (all, all_down)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(n: u8) -> SocketAddr {
        SocketAddr::from(([198, 18, 0, n], 6443))
    }

    #[test]
    fn n_failures_in_a_row_take_a_server_out_and_m_successes_bring_it_back() {
        let mut t = Tracker::new(3, 2);
        t.follow(&[server(1), server(2)]);
        assert!(t.is_up(server(1)), "a new server starts in the answer");
        assert_eq!(t.observe(server(1), false), Turn::Stays);
        assert_eq!(t.observe(server(1), false), Turn::Stays);
        assert_eq!(t.observe(server(1), false), Turn::WentDown);
        assert!(!t.is_up(server(1)));
        assert_eq!(t.down(), BTreeSet::from([server(1).ip()]));
        assert_eq!(t.observe(server(1), false), Turn::Stays);
        assert_eq!(t.observe(server(1), true), Turn::Stays);
        assert_eq!(t.observe(server(1), true), Turn::CameBack);
        assert!(t.is_up(server(1)) && t.down().is_empty());
        assert!(t.is_up(server(2)));
    }

    #[test]
    fn a_run_is_broken_by_one_contrary_result() {
        let mut t = Tracker::new(3, 2);
        t.follow(&[server(1)]);
        for success in [false, false, true, false, false] {
            assert_eq!(t.observe(server(1), success), Turn::Stays);
        }
        assert_eq!(t.observe(server(1), false), Turn::WentDown);
        for success in [true, false, true] {
            assert_eq!(t.observe(server(1), success), Turn::Stays);
        }
        assert_eq!(t.observe(server(1), true), Turn::CameBack);
    }

    #[test]
    fn one_failure_or_success_is_enough_when_configured_so() {
        let mut t = Tracker::new(1, 1);
        t.follow(&[server(1)]);
        assert_eq!(t.observe(server(1), false), Turn::WentDown);
        assert_eq!(t.observe(server(1), true), Turn::CameBack);
    }

    #[test]
    fn servers_no_longer_listed_are_forgotten_and_start_afresh() {
        let mut t = Tracker::new(1, 3);
        t.follow(&[server(1), server(2)]);
        t.observe(server(1), false);
        assert_eq!(t.follow(&[server(2)]), [server(1)]);
        assert!(t.down().is_empty());
        assert_eq!(
            t.observe(server(1), false),
            Turn::Stays,
            "not listed: ignored"
        );
        t.follow(&[server(1), server(2)]);
        assert!(t.is_up(server(1)), "listed again: in the answer");
    }

    #[test]
    fn the_answer_is_never_empty_because_of_probes() {
        let a: IpAddr = "198.18.0.1".parse().unwrap();
        let b: IpAddr = "198.18.0.2".parse().unwrap();
        assert_eq!(never_empty(vec![a], || vec![a, b]), (vec![a], false));
        assert_eq!(never_empty(vec![], || vec![a, b]), (vec![a, b], true));
        // Nothing listed at all is not the probes' doing.
        assert_eq!(never_empty(vec![], Vec::new), (vec![], false));
    }
}
