//! Prometheus metrics. Counters kept elsewhere (the XDP program's per-CPU array, the server's
//! atomics) are read at scrape time by one collector, so nothing is counted twice and the hot
//! paths never touch the registry.
//!
//! Names follow CoreDNS's style where the meaning is the same
//! (`coredns_dns_responses_total{rcode}` → `hostport_dns_responses_total{path,proto,type,rcode}`).

use std::sync::{Arc, Mutex};

use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeMetric},
    metrics::{
        counter::{ConstCounter, Counter},
        family::Family,
        gauge::ConstGauge,
        gauge::Gauge,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};

use hostport_dns_core::table::RecordTable;

use crate::{
    health::Health,
    server::{Shared, stats::ZoneSlot},
    transfer::{
        Transfers,
        secondaries::{MAX_SECONDARIES, Secondaries},
        stats::TransferStats,
        zone_data::ServedZone,
    },
    xdp::counters::Counters,
};
use hostport_dns_common::counters::{Counter as XdpCounter, Verdict};

/// The label set of a series without labels.
const NO_LABELS: [(&str, &str); 0] = [];

/// Metrics the agent updates as it goes.
pub struct Metrics {
    pub table_names: Gauge,
    pub table_records: Gauge,
    pub table_updates: Counter,
    /// Names whose records a publication changed (created, changed or gone).
    pub table_names_changed: Counter,
    /// Zones the catalog lists now.
    pub catalog_members: Gauge,
    /// Derived reverse zones held empty in the catalog for their grace period.
    pub catalog_removals_pending: Gauge,
    /// Name entries written into the kernel table generation switched to.
    pub xdp_names_written: Counter,
    /// Names in the active generation of the kernel table.
    pub xdp_table_names: Gauge,
    /// Names the kernel table holds now, by kind of entry (`small`, `name`, `big`: its size
    /// follows the names served).
    pub xdp_table_capacity: Family<EntryLabel, Gauge>,
    /// Bytes of kernel memory the table's maps take (the entries once, the index, zones and host
    /// set for both generations).
    pub xdp_table_bytes: Gauge,
    /// Names each kind of entry of the kernel table may grow to (`--kernel-names`).
    pub xdp_table_limit: Gauge,
    /// Times the kernel table moved to maps of another size.
    pub xdp_table_resizes: Counter,
    /// Names of the table the kernel table does not hold (their zones did not fit): userspace
    /// answers them.
    pub xdp_names_in_userspace: Gauge,
    /// Names sharing a kernel key with another (userspace answers them).
    pub xdp_collisions: Gauge,
    /// Generation switches of the kernel table.
    pub xdp_generations: Counter,
    /// Failed kernel table writes (the previous complete generation kept answering).
    pub xdp_write_errors: Counter,
    /// Seconds from a source change to the table being served (both paths).
    pub propagation: Histogram,
    /// From a kernel table publication's start to its switch (the new table visible).
    pub xdp_switch: Histogram,
    /// Waits for the runs reading a generation left that fell back to an RCU grace period.
    pub xdp_grace_waits: Counter,
    pub source_synced: Family<SourceLabel, Gauge>,
    pub source_last_sync: Family<SourceLabel, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub source_records: Family<SourceLabel, Gauge>,
    /// Records left out of the table now, by reason.
    pub dropped_records: Family<ReasonLabel, Gauge>,
    /// Nodes whose pods are left out of the answers now (taint, label, unschedulable).
    pub nodes_excluded: Family<ReasonLabel, Gauge>,
    pub source_errors: Family<SourceErrorLabel, Counter>,
    pub source_connected: Family<SourceLabel, Gauge>,
    /// 1 while a source serves the records an earlier run saved.
    pub source_restored: Family<SourceLabel, Gauge>,
    /// 1 for the API server the watchers talk to, 0 for the other candidates.
    pub api_server_active: Family<ServerLabel, Gauge>,
    /// 1 while an EndpointSlice output serves its last non-empty answer (nothing resolves now).
    pub kept_last_answer: Family<OutputLabel, Gauge>,
    /// 1 while a probed server passes its health probes (`endpointSlices[].healthProbe`), 0
    /// while it is left out of its output's answer.
    pub api_server_probe_up: Family<ProbeLabel, Gauge>,
    /// Failed health probes, by server and reason.
    pub api_server_probe_failures: Family<ProbeFailureLabel, Counter>,
    /// 1 while every probed server of an output fails its probes: all are kept in the answer.
    pub api_server_probe_all_down: Family<OutputLabel, Gauge>,
    /// 1 while this agent holds the lease (it writes the external-dns objects).
    pub leader: Gauge,
    /// Writes of external-dns objects, by output and result.
    pub external_dns_writes: Family<ExternalDnsWriteLabel, Counter>,
    /// The XDP program's counters, once it is loaded (read at scrape time).
    xdp: XdpCounters,
}

/// A kind of kernel table entry: `small`, `name` or `big`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct EntryLabel {
    pub entry: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct SourceLabel {
    pub source: String,
}

/// An EndpointSlice output: its Service and its name.
#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct OutputLabel {
    pub source: String,
    pub output: String,
}

/// A write of an external-dns object: its output, and `created`, `updated`, `deleted` or
/// `error`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct ExternalDnsWriteLabel {
    pub output: String,
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct ServerLabel {
    pub server: String,
}

/// A server an EndpointSlice output probes: the output's name, the server's `address:port`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct ProbeLabel {
    pub output: String,
    pub server: String,
}

/// A failed health probe: `timeout`, `refused`, `connect`, `tls`, `http` or `status`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct ProbeFailureLabel {
    pub output: String,
    pub server: String,
    pub reason: String,
}

/// A source's failure: what it was reading and why it failed.
#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct SourceErrorLabel {
    pub source: String,
    /// The Kubernetes resource (`pods`, `endpointslices`, `nodes`).
    pub resource: String,
    /// `forbidden`, `unauthorized`, `unreachable`, `server_error`, `gone`, ...
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: String,
}

impl Metrics {
    /// The kernel table's size gauges, for maps of `capacity`.
    pub fn set_xdp_table_size(&self, capacity: &hostport_dns_common::generation::Capacity) {
        for (entry, count) in ["small", "name", "big"].into_iter().zip(capacity.entries()) {
            self.xdp_table_capacity
                .get_or_create(&EntryLabel { entry })
                .set(i64::from(count));
        }
        let bytes = i64::try_from(capacity.map_bytes()).unwrap_or(i64::MAX);
        self.xdp_table_bytes.set(bytes);
    }

    /// Creates the metrics and registers them, with the live collector, in a new registry.
    pub fn register(
        shared: Arc<Shared>,
        health: Arc<Health>,
        transfers: Option<Arc<Transfers>>,
    ) -> (Arc<Self>, Registry) {
        let xdp: XdpCounters = Arc::default();
        let mut registry = Registry::with_prefix("hostport_dns");
        let metrics = Self {
            table_names: Gauge::default(),
            table_records: Gauge::default(),
            table_updates: Counter::default(),
            table_names_changed: Counter::default(),
            catalog_members: Gauge::default(),
            catalog_removals_pending: Gauge::default(),
            xdp_names_written: Counter::default(),
            xdp_table_names: Gauge::default(),
            xdp_table_capacity: Family::default(),
            xdp_table_bytes: Gauge::default(),
            xdp_table_limit: Gauge::default(),
            xdp_table_resizes: Counter::default(),
            xdp_names_in_userspace: Gauge::default(),
            xdp_collisions: Gauge::default(),
            xdp_generations: Counter::default(),
            xdp_write_errors: Counter::default(),
            propagation: Histogram::new(exponential_buckets(0.0001, 2.0, 16)),
            xdp_switch: Histogram::new(exponential_buckets(0.00001, 2.0, 16)),
            xdp_grace_waits: Counter::default(),
            source_synced: Family::default(),
            source_last_sync: Family::default(),
            source_records: Family::default(),
            dropped_records: Family::default(),
            nodes_excluded: Family::default(),
            source_errors: Family::default(),
            source_connected: Family::default(),
            source_restored: Family::default(),
            api_server_active: Family::default(),
            kept_last_answer: Family::default(),
            api_server_probe_up: Family::default(),
            api_server_probe_failures: Family::default(),
            api_server_probe_all_down: Family::default(),
            leader: Gauge::default(),
            external_dns_writes: Family::default(),
            xdp: XdpCounters::default(),
        };
        registry.register(
            "table_names",
            "Names in the record table (empty non-terminals included)",
            metrics.table_names.clone(),
        );
        registry.register(
            "table_records",
            "A, AAAA and SRV records in the record table",
            metrics.table_records.clone(),
        );
        registry.register(
            "table_updates",
            "Record table publications",
            metrics.table_updates.clone(),
        );
        registry.register(
            "table_names_changed",
            "Names whose records a publication changed: created, changed or gone (a whole compile counts every name)",
            metrics.table_names_changed.clone(),
        );
        registry.register(
            "catalog_members",
            "Zones the catalog zone lists (transfer.catalog; 0 without one)",
            metrics.catalog_members.clone(),
        );
        registry.register(
            "catalog_removals_pending",
            "Derived reverse zones without PTR records held in the catalog (served empty) until their grace period ends",
            metrics.catalog_removals_pending.clone(),
        );
        registry.register(
            "xdp_names_written",
            "Name entries written into the kernel table generation switched to (the generation left is brought up to date with the same change)",
            metrics.xdp_names_written.clone(),
        );
        registry.register(
            "xdp_table_names",
            "Names in the active generation of the kernel table",
            metrics.xdp_table_names.clone(),
        );
        registry.register(
            "xdp_table_capacity",
            "Names the kernel table holds now, by kind of entry (80-byte small, 160-byte name, 592-byte big; its maps' size, which follows the names served)",
            metrics.xdp_table_capacity.clone(),
        );
        registry.register(
            "xdp_table_bytes",
            "Bytes of kernel memory the kernel table's maps take: the entries once, the index, zones and host set for both generations (charged to the agent's memory cgroup)",
            metrics.xdp_table_bytes.clone(),
        );
        registry.register(
            "xdp_table_limit",
            "Names each kind of entry of the kernel table may grow to (--kernel-names); zones beyond it are answered by userspace",
            metrics.xdp_table_limit.clone(),
        );
        registry.register(
            "xdp_table_resizes",
            "Times the kernel table moved to maps of another size (a new program with its own maps, swapped in atomically)",
            metrics.xdp_table_resizes.clone(),
        );
        registry.register(
            "xdp_names_in_userspace",
            "Names the kernel table does not hold because their zones did not fit (answered by userspace)",
            metrics.xdp_names_in_userspace.clone(),
        );
        registry.register(
            "xdp_collisions",
            "Names sharing a kernel table key with another name (answered by userspace)",
            metrics.xdp_collisions.clone(),
        );
        registry.register(
            "xdp_generations",
            "Generation switches of the kernel table",
            metrics.xdp_generations.clone(),
        );
        registry.register(
            "xdp_write_errors",
            "Failed kernel table writes; the previous complete generation kept answering",
            metrics.xdp_write_errors.clone(),
        );
        registry.register(
            "propagation_seconds",
            "Time from a source change to the new table being served (after the kernel's switch, when XDP is on)",
            metrics.propagation.clone(),
        );
        registry.register(
            "xdp_switch_seconds",
            "Time from the start of a kernel table publication to its switch (the new table visible to the XDP program)",
            metrics.xdp_switch.clone(),
        );
        registry.register(
            "xdp_grace_waits",
            "Waits for XDP runs still reading a generation left that fell back to an RCU grace period (a CPU stayed in the program too long)",
            metrics.xdp_grace_waits.clone(),
        );
        registry.register(
            "source_synced",
            "1 once the source has been fully loaded",
            metrics.source_synced.clone(),
        );
        registry.register(
            "source_last_sync_timestamp_seconds",
            "When the source last delivered a complete, valid state",
            metrics.source_last_sync.clone(),
        );
        registry.register(
            "source_records",
            "Records the source currently provides",
            metrics.source_records.clone(),
        );
        registry.register(
            "dropped_records",
            "Records left out of the table now, by reason",
            metrics.dropped_records.clone(),
        );
        registry.register(
            "nodes_excluded",
            "Nodes whose pods are left out of the answers now, by reason (nodes section)",
            metrics.nodes_excluded.clone(),
        );
        registry.register(
            "source_errors",
            "Source failures (watch errors, by resource and reason), retried",
            metrics.source_errors.clone(),
        );
        registry.register(
            "source_connected",
            "1 while the source's backend answers (every watch works)",
            metrics.source_connected.clone(),
        );
        registry.register(
            "source_restored",
            "1 while the source serves the records an earlier run saved, until its watches have listed",
            metrics.source_restored.clone(),
        );
        registry.register(
            "api_server_active",
            "1 for the API server the watches use now, 0 for the other candidates",
            metrics.api_server_active.clone(),
        );
        registry.register(
            "kept_last_answer",
            "1 while an EndpointSlice output serves its last non-empty answer because nothing resolves now",
            metrics.kept_last_answer.clone(),
        );
        registry.register(
            "api_server_probe_up",
            "1 while a server an EndpointSlice output probes passes its health probes, 0 while it is left out of the answer",
            metrics.api_server_probe_up.clone(),
        );
        registry.register(
            "api_server_probe_failures",
            "Failed health probes of the servers EndpointSlice outputs probe, by reason (timeout, refused, connect, tls, http, status)",
            metrics.api_server_probe_failures.clone(),
        );
        registry.register(
            "api_server_probe_all_down",
            "1 while every probed server of an EndpointSlice output fails its probes: all are kept in the answer",
            metrics.api_server_probe_all_down.clone(),
        );
        registry.register(
            "leader",
            "1 while this agent holds the Lease that elects the one writer (external-dns objects)",
            metrics.leader.clone(),
        );
        registry.register(
            "external_dns_writes",
            "Writes of the objects external-dns reads, by output and result (created, updated, deleted, error)",
            metrics.external_dns_writes.clone(),
        );
        // A gauge of 1 rather than an OpenMetrics info metric: the Prometheus text format (and
        // promtool) has no info type.
        let build = Family::<Vec<(&'static str, &'static str)>, Gauge>::default();
        build
            .get_or_create(&vec![("version", env!("CARGO_PKG_VERSION"))])
            .set(1);
        registry.register(
            "build_info",
            "Build information: 1, labelled with the version",
            build,
        );
        registry.register_collector(Box::new(LiveCollector {
            shared,
            xdp: xdp.clone(),
            health,
            transfers,
        }));
        (Arc::new(Self { xdp, ..metrics }), registry)
    }

    /// The XDP program's counters join the scrape (once the program is loaded).
    /// A resized table's program brings counters of its own: they carry on from the previous
    /// program's totals.
    pub fn install_xdp_counters(&self, mut counters: Counters) {
        let mut installed = self.xdp.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(previous) = installed.take() {
            counters.succeed(previous);
        }
        *installed = Some(counters);
    }
}

/// The XDP program's counters, once loaded: read at scrape time.
type XdpCounters = Arc<Mutex<Option<Counters>>>;

/// Reads the answer and pass counters at scrape time.
#[derive(Debug)]
struct LiveCollector {
    shared: Arc<Shared>,
    xdp: XdpCounters,
    health: Arc<Health>,
    transfers: Option<Arc<Transfers>>,
}

impl std::fmt::Debug for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Health")
    }
}

impl std::fmt::Debug for Counters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Counters")
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Shared")
    }
}

impl Collector for LiveCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let (xdp, xdp_zones, xdp_events) = self
            .xdp
            .lock()
            .map(|c| match c.as_ref() {
                Some(c) => (Some(c.read()), c.zone_answers(), c.events()),
                None => (None, Vec::new(), Vec::new()),
            })
            .unwrap_or((None, Vec::new(), Vec::new()));
        let mut responses = encoder.encode_descriptor(
            "responses",
            "Answers sent, by path (xdp, userspace), transport, query type and rcode",
            None,
            prometheus_client::metrics::MetricType::Counter,
        )?;
        for (proto, qtype, rcode, count) in self.shared.stats.snapshot() {
            let labels = [
                ("path", "userspace"),
                ("proto", proto),
                ("type", qtype),
                ("rcode", rcode),
            ];
            ConstCounter::new(count).encode(responses.encode_family(&labels)?)?;
        }
        if let Some(counters) = &xdp {
            // Positive answers and NODATA share an rcode: one series per label set (as the
            // userspace path counts them), never two with the same labels.
            let mut answers: std::collections::BTreeMap<(&str, &str), u64> = Default::default();
            for (counter, count) in counters {
                if let Some(kind) = counter.answer_kind() {
                    *answers.entry((kind.qtype, kind.rcode)).or_default() += *count;
                }
            }
            for ((qtype, rcode), count) in answers {
                let labels = [
                    ("path", "xdp"),
                    ("proto", "udp"),
                    ("type", qtype),
                    ("rcode", rcode),
                ];
                ConstCounter::new(count).encode(responses.encode_family(&labels)?)?;
            }
            let mut passed = encoder.encode_descriptor(
                "xdp_passed",
                "Packets the XDP program passed up the stack, by reason",
                None,
                prometheus_client::metrics::MetricType::Counter,
            )?;
            for (counter, count) in counters {
                if counter.verdict() == Verdict::Passed {
                    ConstCounter::new(*count)
                        .encode(passed.encode_family(&[("reason", counter.label())])?)?;
                }
            }
            let mut events = encoder.encode_descriptor(
                "xdp_events",
                "Paths the XDP program took: grown_at_tail (an answer that outgrew the headroom grew at the tail, which fails on drivers without tailroom), generation_race (a run met a table switch between its two reads of the active generation and passed the query)",
                None,
                prometheus_client::metrics::MetricType::Counter,
            )?;
            for (event, count) in &xdp_events {
                ConstCounter::new(*count)
                    .encode(events.encode_family(&[("event", event.label())])?)?;
            }
        }
        let mut decided = encoder.encode_descriptor(
            "client_policy",
            "Queries the client policy kept from their full answer, by path and decision (martian, not_allowed, refused, rate_limited, slipped, badcookie)",
            None,
            prometheus_client::metrics::MetricType::Counter,
        )?;
        for (decision, count) in self.shared.stats.decisions() {
            ConstCounter::new(count)
                .encode(decided.encode_family(&[("path", "userspace"), ("decision", decision)])?)?;
        }
        if let Some(counters) = &xdp {
            for (counter, count) in counters {
                let decision = match counter {
                    XdpCounter::DropMartian => "martian",
                    XdpCounter::DropNotAllowed => "not_allowed",
                    XdpCounter::DropRateLimited => "rate_limited",
                    XdpCounter::SlipRateLimited => "slipped",
                    _ => continue,
                };
                ConstCounter::new(*count)
                    .encode(decided.encode_family(&[("path", "xdp"), ("decision", decision)])?)?;
            }
        }
        let mut truncated = encoder.encode_descriptor(
            "truncated",
            "UDP answers sent truncated (TC=1) because they did not fit",
            None,
            prometheus_client::metrics::MetricType::Counter,
        )?;
        ConstCounter::new(self.shared.stats.truncated())
            .encode(truncated.encode_family(&[("proto", "udp")])?)?;
        let mut srv_compressed = encoder.encode_descriptor(
            "srv_targets_compressed",
            "Answers sent with their SRV targets compressed because in full they did not fit (UDP, offers over 1232 bytes)",
            None,
            prometheus_client::metrics::MetricType::Counter,
        )?;
        ConstCounter::new(self.shared.stats.srv_targets_compressed())
            .encode(srv_compressed.encode_family(&NO_LABELS)?)?;
        let mut cache_bytes = encoder.encode_descriptor(
            "answer_cache_bytes",
            "Bytes the userspace answer caches hold, over all threads",
            None,
            prometheus_client::metrics::MetricType::Gauge,
        )?;
        ConstGauge::new(crate::server::cache::cached_bytes() as i64)
            .encode(cache_bytes.encode_family(&NO_LABELS)?)?;
        let mut tcp_open = encoder.encode_descriptor(
            "tcp_connections",
            "TCP connections open now",
            None,
            prometheus_client::metrics::MetricType::Gauge,
        )?;
        ConstGauge::new(self.shared.stats.tcp_open() as i64)
            .encode(tcp_open.encode_family(&[("proto", "tcp")])?)?;
        let mut tcp_closed = encoder.encode_descriptor(
            "tcp_closed",
            "TCP connections ended, by reason (by_client, idle, write_timeout, lifetime, queries, client_cap: refused at accept, error)",
            None,
            prometheus_client::metrics::MetricType::Counter,
        )?;
        for (reason, count) in self.shared.stats.tcp_closes() {
            ConstCounter::new(count).encode(tcp_closed.encode_family(&[("reason", reason)])?)?;
        }
        let mut staleness = encoder.encode_descriptor(
            "source_staleness_seconds",
            "Seconds since the source was last known current (a complete state, an event, a probe)",
            None,
            prometheus_client::metrics::MetricType::Gauge,
        )?;
        for (source, age) in self.health.staleness() {
            let seconds = age.map_or(f64::INFINITY, |a| a.as_secs_f64());
            ConstGauge::new(seconds)
                .encode(staleness.encode_family(&[("source", source.as_str())])?)?;
        }
        encode_zone_serials(self.shared.table().as_deref(), &mut encoder)?;
        if let Some(transfers) = &self.transfers {
            encode_transfers(&transfers.stats, &mut encoder)?;
            encode_secondaries(&transfers.stats.secondaries, &mut encoder)?;
        }
        self.encode_requests(xdp.as_deref(), &xdp_zones, &mut encoder)?;
        encode_histograms(&self.shared.stats, &mut encoder)?;
        let mut ready = encoder.encode_descriptor(
            "ready",
            "1 while /readyz answers 200 (every source synced, the table published, nothing stale)",
            None,
            prometheus_client::metrics::MetricType::Gauge,
        )?;
        ConstGauge::new(i64::from(self.health.not_ready_reason().is_none()))
            .encode(ready.encode_family(&NO_LABELS)?)?;
        let mut attached = encoder.encode_descriptor(
            "xdp_attached",
            "Per interface the XDP program is to run on: 1 while it is attached (mode: native, generic, pinned, adopted), 0 until it is (mode none) or when it cannot run (mode unavailable)",
            None,
            prometheus_client::metrics::MetricType::Gauge,
        )?;
        let unavailable = self.health.xdp_unavailable_reason().is_some();
        let unattached = if unavailable { "unavailable" } else { "none" };
        for (interface, mode) in self.health.xdp() {
            ConstGauge::new(i64::from(mode.is_some())).encode(attached.encode_family(&[
                ("interface", interface.as_str()),
                ("mode", mode.unwrap_or(unattached)),
            ])?)?;
        }
        let mut fallback = encoder.encode_descriptor(
            "xdp_fallback",
            "1 when the XDP program could not load or attach (--xdp-mode auto) and userspace answers every query",
            None,
            prometheus_client::metrics::MetricType::Gauge,
        )?;
        ConstGauge::new(i64::from(unavailable)).encode(fallback.encode_family(&NO_LABELS)?)?;
        Ok(())
    }
}

impl LiveCollector {
    /// Requests by path, transport, zone and type: those answered, by the zone of the question
    /// (the XDP program counts its answers per zone counter slot), and those dropped by the
    /// client policy (`zone="dropped"`, `type="none"`).
    fn encode_requests(
        &self,
        xdp: Option<&[(XdpCounter, u64)]>,
        xdp_zones: &[(String, bool, u64)],
        encoder: &mut DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        let mut requests = encoder.encode_descriptor(
            "requests",
            "Requests by path (xdp, userspace), transport, zone (the question's zone, reverse, other_zones, none; dropped: by the client policy) and query type",
            None,
            prometheus_client::metrics::MetricType::Counter,
        )?;
        let table = self.shared.table();
        let zone_name = |id: u32| {
            table
                .as_ref()
                .and_then(|t| t.zones().get(id as usize))
                .map_or_else(|| "other_zones".to_owned(), |z| z.spec.apex.to_ascii())
        };
        for (proto, slot, qtype, count) in self.shared.stats.requests() {
            let zone = match slot {
                ZoneSlot::Zone(id) => zone_name(id),
                ZoneSlot::Label(label) => label.to_owned(),
            };
            let labels = [
                ("path", "userspace"),
                ("proto", proto),
                ("zone", zone.as_str()),
                ("type", qtype),
            ];
            ConstCounter::new(count).encode(requests.encode_family(&labels)?)?;
        }
        let dropped: u64 = self
            .shared
            .stats
            .decisions()
            .filter(|(d, _)| matches!(*d, "martian" | "not_allowed" | "rate_limited"))
            .map(|(_, n)| n)
            .sum();
        let labels = [
            ("path", "userspace"),
            ("proto", "udp"),
            ("zone", "dropped"),
            ("type", "none"),
        ];
        ConstCounter::new(dropped).encode(requests.encode_family(&labels)?)?;
        let Some(counters) = xdp else {
            return Ok(());
        };
        // Answers (slips included) by zone: the program counts them in the slot the writer gave
        // the zone, which follows the zone whatever its id.
        let mut by_zone: std::collections::BTreeMap<(String, &str), u64> = Default::default();
        for (apex, aaaa, count) in xdp_zones {
            let qtype = if *aaaa { "AAAA" } else { "A" };
            *by_zone.entry((apex.clone(), qtype)).or_default() += count;
        }
        let dropped: u64 = counters
            .iter()
            .filter(|(c, _)| c.verdict() == Verdict::Dropped)
            .map(|(_, n)| n)
            .sum();
        by_zone.insert(("dropped".to_owned(), "none"), dropped);
        for ((zone, qtype), count) in by_zone {
            let labels = [
                ("path", "xdp"),
                ("proto", "udp"),
                ("zone", zone.as_str()),
                ("type", qtype),
            ];
            ConstCounter::new(count).encode(requests.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

/// The userspace server's request duration and message sizes, per transport.
fn encode_histograms(
    stats: &crate::server::stats::ServerStats,
    encoder: &mut DescriptorEncoder,
) -> Result<(), std::fmt::Error> {
    let snapshots: Vec<_> = stats.histograms().collect();
    let mut duration = encoder.encode_descriptor(
        "request_duration_seconds",
        "Userspace server: from a query read to its answer made (the XDP path's own time is in bpf statistics)",
        None,
        prometheus_client::metrics::MetricType::Histogram,
    )?;
    for (proto, took, _, _) in &snapshots {
        took.encode(duration.encode_family(&[("proto", *proto)])?)?;
    }
    let mut request_size = encoder.encode_descriptor(
        "request_size_bytes",
        "Userspace server: size of the queries, DNS message bytes",
        None,
        prometheus_client::metrics::MetricType::Histogram,
    )?;
    for (proto, _, size, _) in &snapshots {
        size.encode(request_size.encode_family(&[("proto", *proto)])?)?;
    }
    let mut response_size = encoder.encode_descriptor(
        "response_size_bytes",
        "Userspace server: size of the answers, DNS message bytes",
        None,
        prometheus_client::metrics::MetricType::Histogram,
    )?;
    for (proto, _, _, size) in &snapshots {
        size.encode(response_size.encode_family(&[("proto", *proto)])?)?;
    }
    Ok(())
}

/// Transfer requests by type and result, their bytes, and NOTIFYs by result.
fn encode_transfers(
    stats: &TransferStats,
    encoder: &mut DescriptorEncoder,
) -> Result<(), std::fmt::Error> {
    let mut requests = encoder.encode_descriptor(
        "transfers",
        "Zone transfer requests, by type (axfr, ixfr) and result (axfr, ixfr, axfr_fallback, up_to_date, refused, bad_tsig, notauth, not_ready, malformed)",
        None,
        prometheus_client::metrics::MetricType::Counter,
    )?;
    for (kind, result, count) in stats.requests() {
        ConstCounter::new(count)
            .encode(requests.encode_family(&[("type", kind), ("result", result)])?)?;
    }
    let mut bytes = encoder.encode_descriptor(
        "transfer_bytes",
        "Bytes of the messages of answered transfers, by type",
        None,
        prometheus_client::metrics::MetricType::Counter,
    )?;
    for (kind, count) in stats.bytes() {
        ConstCounter::new(count).encode(bytes.encode_family(&[("type", kind)])?)?;
    }
    let mut notifies = encoder.encode_descriptor(
        "notify",
        "NOTIFY messages to secondaries, by result (acknowledged, retried, failed)",
        None,
        prometheus_client::metrics::MetricType::Counter,
    )?;
    for (result, count) in stats.notifies() {
        ConstCounter::new(count).encode(notifies.encode_family(&[("result", result)])?)?;
    }
    Ok(())
}

/// The serial every zone served has now, forward and reverse, from the table being answered
/// (what a secondary should come to hold; zones still pending have none yet).
fn encode_zone_serials(
    table: Option<&RecordTable>,
    encoder: &mut DescriptorEncoder,
) -> Result<(), std::fmt::Error> {
    let mut serials = encoder.encode_descriptor(
        "zone_serial",
        "The SOA serial each served zone (forward and reverse) has now",
        None,
        prometheus_client::metrics::MetricType::Gauge,
    )?;
    for zone in table.map(ServedZone::all).unwrap_or_default() {
        let apex = zone.apex().to_ascii();
        ConstGauge::new(i64::from(zone.serial()))
            .encode(serials.encode_family(&[("zone", apex.as_str())])?)?;
    }
    Ok(())
}

/// Per zone and secondary (the client address of its transfers): the serial it holds and when
/// that was learnt (`transfer::secondaries` says what counts).
fn encode_secondaries(
    secondaries: &Secondaries,
    encoder: &mut DescriptorEncoder,
) -> Result<(), std::fmt::Error> {
    let snapshot = secondaries.snapshot();
    let mut serials = encoder.encode_descriptor(
        "secondary_serial",
        "The serial a secondary (by the address its transfers come from) holds of a zone: the one in its IXFR request, or the zone's once a transfer was sent to it in full",
        None,
        prometheus_client::metrics::MetricType::Gauge,
    )?;
    for (zone, address, held) in &snapshot {
        let address = address.to_string();
        let labels = [("zone", zone.as_str()), ("secondary", address.as_str())];
        ConstGauge::new(i64::from(held.serial)).encode(serials.encode_family(&labels)?)?;
    }
    let mut when = encoder.encode_descriptor(
        "secondary_serial_timestamp_seconds",
        "When hostport_dns_secondary_serial was last learnt (its last transfer request or transfer), seconds since the epoch",
        None,
        prometheus_client::metrics::MetricType::Gauge,
    )?;
    for (zone, address, held) in &snapshot {
        let address = address.to_string();
        let labels = [("zone", zone.as_str()), ("secondary", address.as_str())];
        ConstGauge::new(held.at).encode(when.encode_family(&labels)?)?;
    }
    let help = format!(
        "Transfer requests from admitted addresses beyond the {MAX_SECONDARIES} secondaries followed: their serials are not shown"
    );
    let mut untracked = encoder.encode_descriptor(
        "secondary_untracked",
        &help,
        None,
        prometheus_client::metrics::MetricType::Counter,
    )?;
    ConstCounter::new(secondaries.untracked()).encode(untracked.encode_family(&NO_LABELS)?)?;
    Ok(())
}
