//! Secondaries as the primary sees them: per zone and per client address that transferred it,
//! the serial the secondary is known to hold and when that was learnt, read by the metrics
//! collector at scrape time (`hostport_dns_secondary_serial`,
//! `hostport_dns_secondary_serial_timestamp_seconds`).
//!
//! What a secondary is known to hold: the serial in its IXFR request (what it has), then the
//! zone's serial once an IXFR, or an AXFR, has been sent to it in full (what it received). An
//! SOA query tells nothing of what it holds (only what it will learn), and is not counted.
//!
//! Keyed by client address, not by the configured NOTIFY targets: a secondary may transfer from
//! another address than the one NOTIFY goes to, or not be notified at all (a polling one). The
//! label set is bounded: only requests the transfer ACL admitted (with their key verified) are
//! recorded, and at most [`MAX_SECONDARIES`] addresses; requests from further addresses are
//! only counted. Entries last as long as the agent (a stopped secondary must stay visible, at
//! its old serial): a secondary taken out of service leaves with the next restart.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
    sync::Mutex,
    time::{SystemTime, UNIX_EPOCH},
};

/// The most client addresses followed. Secondaries are a handful of servers: this leaves room
/// for renumbering, and bounds the series a client inside the ACL can create.
pub const MAX_SECONDARIES: usize = 64;

/// What one secondary is known to hold of one zone.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Held {
    pub serial: u32,
    /// When that was learnt, seconds since the epoch.
    pub at: f64,
}

/// Per (zone, secondary address): what it holds.
#[derive(Default)]
pub struct Secondaries {
    held: Mutex<BTreeMap<(String, IpAddr), Held>>,
    /// Requests from addresses beyond [`MAX_SECONDARIES`], not followed.
    untracked: Mutex<u64>,
}

impl Secondaries {
    /// `client` holds `serial` of `zone` (its apex, as text), as of now.
    pub fn holds(&self, zone: &str, client: IpAddr, serial: u32) {
        self.holds_at(zone, client, serial, unix_seconds());
    }

    fn holds_at(&self, zone: &str, client: IpAddr, serial: u32, at: f64) {
        // One address, whatever family the socket reported it in (a v4-mapped v6 address is the
        // same secondary).
        let client = client.to_canonical();
        let mut held = lock(&self.held);
        let key = (zone.to_owned(), client);
        if !held.contains_key(&key) && !has_room(&held, client) {
            drop(held);
            *lock(&self.untracked) += 1;
            return;
        }
        held.insert(key, Held { serial, at });
    }

    /// (zone, address, what it holds) of every secondary followed, in a stable order.
    pub fn snapshot(&self) -> Vec<(String, IpAddr, Held)> {
        lock(&self.held)
            .iter()
            .map(|((zone, address), held)| (zone.clone(), *address, *held))
            .collect()
    }

    /// Transfer requests from addresses not followed (beyond the cap).
    pub fn untracked(&self) -> u64 {
        *lock(&self.untracked)
    }
}

/// Whether `client` is followed already (for another zone) or there is room for one more.
fn has_room(held: &BTreeMap<(String, IpAddr), Held>, client: IpAddr) -> bool {
    let addresses: BTreeSet<IpAddr> = held.keys().map(|(_, a)| *a).collect();
    addresses.contains(&client) || addresses.len() < MAX_SECONDARIES
}

fn unix_seconds() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(i: u32) -> IpAddr {
        IpAddr::from(std::net::Ipv4Addr::from(0xc612_0000 + i))
    }

    #[test]
    fn the_latest_serial_of_each_zone_and_address_is_kept() {
        let s = Secondaries::default();
        s.holds_at("a.example.", addr(1), 10, 1.0);
        s.holds_at("a.example.", addr(1), 12, 2.0);
        s.holds_at("b.example.", addr(1), 7, 3.0);
        let snapshot = s.snapshot();
        assert_eq!(
            snapshot,
            vec![
                (
                    "a.example.".into(),
                    addr(1),
                    Held {
                        serial: 12,
                        at: 2.0
                    }
                ),
                ("b.example.".into(), addr(1), Held { serial: 7, at: 3.0 }),
            ]
        );
    }

    #[test]
    fn a_v4_mapped_address_is_the_v4_secondary() {
        let s = Secondaries::default();
        let mapped = IpAddr::from(std::net::Ipv4Addr::new(198, 18, 0, 1).to_ipv6_mapped());
        s.holds_at("a.example.", mapped, 1, 1.0);
        assert_eq!(s.snapshot()[0].1, "198.18.0.1".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn addresses_beyond_the_cap_are_counted_not_followed() {
        let s = Secondaries::default();
        for i in 0..MAX_SECONDARIES as u32 + 10 {
            s.holds_at("a.example.", addr(i), 1, 1.0);
        }
        assert_eq!(s.snapshot().len(), MAX_SECONDARIES);
        assert_eq!(s.untracked(), 10);
        // A followed address still gets its other zones and newer serials.
        s.holds_at("b.example.", addr(0), 2, 2.0);
        s.holds_at("a.example.", addr(1), 3, 2.0);
        assert_eq!(s.snapshot().len(), MAX_SECONDARIES + 1);
        assert_eq!(s.untracked(), 10);
    }
}
