//! The catalog's grace period for derived reverse zones: a /24 or /64 whose last PTR record
//! went (the last ingress pod of a subnet's nodes restarting, say) stays served, empty, and a
//! member of the catalog for the period, so that catalog consumers do not delete the zone and
//! create it again for a node's restart. A zone that gets a PTR record back within the period
//! simply goes on; one still empty at its end leaves, and the catalog says so.
//!
//! It follows the table the publisher compiles: what is held is a function of which reverse
//! zones the tables held, and of the time.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::{Duration, Instant},
};

use hostport_dns_core::table::{Network, RecordTable};

pub struct ReverseGrace {
    period: Duration,
    /// Each held zone, and when it is let go.
    held: BTreeMap<Network, Instant>,
}

impl ReverseGrace {
    pub fn new(period: Duration) -> Self {
        Self {
            period,
            held: BTreeMap::new(),
        }
    }

    /// The zones to hold after a compile, at `now`: `before` are the reverse zones of the table
    /// before it, `table` the table it made (with what was held until now still held). A zone
    /// that left is held for the period from the first time it left (a whole compile, which
    /// starts from nothing held, does not extend it); a held zone with a PTR record again, or
    /// whose period is over, is let go.
    pub fn follow(
        &mut self,
        before: &BTreeSet<Network>,
        table: &RecordTable,
        now: Instant,
    ) -> BTreeSet<Network> {
        if table.reverse_zones_configured() || self.period.is_zero() {
            self.held.clear();
            return BTreeSet::new();
        }
        let now_served: BTreeSet<Network> = table
            .reverse_networks()
            .copied()
            .filter(|network| !table.is_held(network))
            .collect();
        for network in before.difference(&now_served) {
            if !table.has_ptr_in(network) {
                self.held.entry(*network).or_insert(now + self.period);
            }
        }
        self.held
            .retain(|network, until| *until > now && !table.has_ptr_in(network));
        self.held.keys().copied().collect()
    }

    /// When the next held zone is to be let go.
    pub fn next_expiry(&self) -> Option<Instant> {
        self.held.values().min().copied()
    }

    /// Zones held now: removals from the catalog pending.
    pub fn held_count(&self) -> usize {
        self.held.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::rr::Name;
    use hostport_dns_core::{
        records::{RecordData, SourceRecord},
        table::TableBuilder,
        zone::ZoneSpec,
    };

    fn host(address: &str) -> SourceRecord {
        SourceRecord::new(
            &Name::from_ascii("h.example.").unwrap(),
            None,
            RecordData::A(address.parse().unwrap()),
        )
    }

    #[test]
    fn a_zone_that_empties_is_held_for_the_period_and_one_that_refills_is_let_go() {
        let zone = ZoneSpec::with_defaults(Name::from_ascii("example.").unwrap());
        let (mut builder, _) = TableBuilder::new(&[zone]);
        let mut grace = ReverseGrace::new(Duration::from_secs(60));
        let start = Instant::now();
        let record = host("198.18.9.1");
        builder.add([&record]);
        builder.finish();
        let network = Network::new("198.18.9.1".parse().unwrap(), 24).unwrap();
        let served = |builder: &TableBuilder| -> BTreeSet<Network> {
            builder.table().reverse_networks().copied().collect()
        };
        let before = served(&builder);
        builder.remove([&record]);
        builder.finish();
        let held = grace.follow(&before, builder.table(), start);
        assert_eq!(held, BTreeSet::from([network]));
        builder.hold_reverse(held);
        assert_eq!(grace.next_expiry(), Some(start + Duration::from_secs(60)));
        // A whole compile starts from nothing held: the period is not extended.
        let later = start + Duration::from_secs(30);
        let (mut fresh, _) = TableBuilder::new(builder.zone_specs());
        fresh.finish();
        assert_eq!(grace.follow(&before, fresh.table(), later).len(), 1);
        assert_eq!(grace.next_expiry(), Some(start + Duration::from_secs(60)));
        // Refilled: let go at once.
        let before = served(&builder);
        builder.add([&record]);
        builder.finish();
        assert!(grace.follow(&before, builder.table(), later).is_empty());
        // Emptied again and never refilled: let go when the period is over.
        let before = served(&builder);
        builder.remove([&record]);
        builder.finish();
        assert_eq!(grace.follow(&before, builder.table(), later).len(), 1);
        let after = later + Duration::from_secs(61);
        assert!(grace.follow(&before, builder.table(), after).is_empty());
        assert_eq!(grace.held_count(), 0);
    }
}
