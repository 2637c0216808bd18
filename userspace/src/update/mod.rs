//! RFC 2136 UPDATEs to an existing primary (`update:` in the configuration): the names of a
//! served zone written into a zone of another server (BIND, or any primary taking TSIG-signed
//! updates), for users who cannot delegate a zone to hostport-dns.
//!
//! Every published table reaches [`Updates::record`] with the names it changed (those the
//! transfer history keeps for IXFR). One task per target follows them: it keeps what it last
//! wrote per name and sends the difference ([`plan`]) when the names change, one message in
//! flight ([`sender`], over TCP). It writes only while `leading` says so (the elected agent);
//! when it starts writing (at start, or on becoming the leader) every managed name is sent as
//! not known: "delete RRset, add the current records", which needs no knowledge of the remote
//! content. A failed exchange is retried with backoff (1 s doubling to 60 s), its names sent as
//! not known; a failed prerequisite sends them so at once.

pub mod config;
pub mod plan;
pub mod sender;

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{Arc, Mutex},
    time::Duration,
};

use hickory_proto::rr::Name;
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};
use rustc_hash::FxHashSet;
use tokio::sync::{Notify, watch};
use tracing::{debug, error, info, warn};

pub use config::{UpdateEntry, UpdateTarget};

use self::{
    plan::{Rrsets, batches, name_update},
    sender::Outcome,
};
use crate::transfer::{Transfers, zone_data::ServedZone};
use hostport_dns_core::{
    dns::WireName,
    table::{RecordTable, Zone},
};

/// The first wait after a failed exchange; each next one twice as long, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// Changed names remembered between two runs of a target's task; beyond, every name is
/// compared (as after a rebuilt table).
const MAX_PENDING_NAMES: usize = 100_000;

/// The labels of `hostport_dns_update_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    target: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TargetLabel {
    target: String,
}

/// The metrics of every target.
#[derive(Clone, Default)]
struct UpdateMetrics {
    messages: Family<ResultLabels, Counter>,
    in_sync: Family<TargetLabel, Gauge>,
}

/// Tables as they are published, for one target's task: the newest, and the names changed
/// since the task last took them.
#[derive(Default)]
struct Feed {
    pending: Mutex<Pending>,
    wake: Notify,
}

/// At first: no table, and any name may have changed.
#[derive(Default)]
struct Pending {
    table: Option<Arc<RecordTable>>,
    /// None: any name may have changed.
    changed: Option<FxHashSet<WireName>>,
}

/// The RFC 2136 targets and what feeds them.
pub struct Updates {
    targets: Vec<(UpdateTarget, Arc<Feed>)>,
    metrics: UpdateMetrics,
}

impl Updates {
    pub fn new(targets: Vec<UpdateTarget>) -> Self {
        let metrics = UpdateMetrics::default();
        // Every series from the start, at 0: an alert on a rate needs the series before the
        // first failure.
        for target in &targets {
            metrics
                .in_sync
                .get_or_create(&TargetLabel {
                    target: target.label(),
                })
                .set(0);
            for result in sender::RESULTS {
                let _ = metrics.messages.get_or_create(&ResultLabels {
                    target: target.label(),
                    result: result.to_owned(),
                });
            }
        }
        Self {
            targets: targets
                .into_iter()
                .map(|t| (t, Arc::new(Feed::default())))
                .collect(),
            metrics,
        }
    }

    /// Registers `hostport_dns_update_total{target,result}` and `hostport_dns_update_in_sync`.
    pub fn register_metrics(&self, registry: &mut Registry) {
        registry.register(
            "update",
            "RFC 2136 UPDATE messages sent, by target (<zone>@<server>) and result (applied, prerequisite_failed, not_authorized, refused, failed)",
            self.metrics.messages.clone(),
        );
        registry.register(
            "update_in_sync",
            "1 while the target holds what this agent serves (its last UPDATEs applied); 0 while they fail, before the first, and while another agent writes",
            self.metrics.in_sync.clone(),
        );
    }

    /// A table was published; `changed`: the names it changed from the one before (None: any
    /// may have).
    pub fn record(&self, table: &Arc<RecordTable>, changed: Option<&[WireName]>) {
        for (_, feed) in &self.targets {
            let mut pending = feed.pending.lock().unwrap_or_else(|e| e.into_inner());
            pending.table = Some(table.clone());
            match (&mut pending.changed, changed) {
                (Some(names), Some(more)) if names.len() + more.len() <= MAX_PENDING_NAMES => {
                    names.extend(more.iter().cloned());
                }
                (slot, _) => *slot = None,
            }
            drop(pending);
            feed.wake.notify_one();
        }
    }

    /// Runs a task per target until the agent stops. `keys`: the transfer configuration's
    /// keys; `leading`: whether this agent is the one that writes (constant true without
    /// leader election).
    pub fn spawn(self: &Arc<Self>, keys: Option<Arc<Transfers>>, leading: watch::Receiver<bool>) {
        for (target, feed) in &self.targets {
            let task = Task {
                target: target.clone(),
                label: target.label(),
                feed: feed.clone(),
                keys: keys.clone(),
                metrics: self.metrics.clone(),
                written: BTreeMap::new(),
                seen: BTreeSet::new(),
                unknown: Unknown::All,
            };
            tokio::spawn(task.run(leading.clone()));
        }
    }
}

/// Which names' remote content is not known (sent as "delete RRset, add").
#[derive(Debug)]
enum Unknown {
    /// Every managed name: at start, and on becoming the writer.
    All,
    Names(BTreeSet<Name>),
}

/// One target's writer.
struct Task {
    target: UpdateTarget,
    label: String,
    feed: Arc<Feed>,
    keys: Option<Arc<Transfers>>,
    metrics: UpdateMetrics,
    /// What was last written per name of the source zone (names written empty are left out).
    written: BTreeMap<Name, Rrsets>,
    /// Every name of the source zone with addresses in a table this agent took, while leading
    /// or not, until written empty: with every name managed (no `names`), what another leader
    /// may have written, so a name gone by the time this agent leads is still deleted.
    seen: BTreeSet<Name>,
    unknown: Unknown,
}

/// Why a sync stopped before the end.
enum Stopped {
    /// An exchange failed: retry after a wait.
    Failed,
    /// Leadership was lost.
    NotLeading,
}

impl Task {
    async fn run(mut self, mut leading: watch::Receiver<bool>) {
        let mut backoff = FIRST_BACKOFF;
        // What is still to do: the names changed since the last sync (None: any).
        let mut changed: Option<FxHashSet<WireName>> = None;
        let mut table: Option<Arc<RecordTable>> = None;
        loop {
            if !*leading.borrow_and_update() {
                self.set_in_sync(false);
                // Whoever writes meanwhile, what is there is not known any more.
                self.unknown = Unknown::All;
                self.written.clear();
                if !self.follow(&mut leading).await {
                    return;
                }
                info!(target = %self.label, "writing RFC 2136 updates (this agent leads): every name is sent again");
                continue;
            }
            let (newest, more) = self.take();
            if let Some(newest) = newest {
                self.note_seen(&newest, more.as_ref());
                table = Some(newest);
            }
            changed = match (changed, more) {
                (Some(mut a), Some(b)) => {
                    a.extend(b);
                    Some(a)
                }
                _ => None,
            };
            let ready = table
                .as_ref()
                .and_then(|t| ServedZone::find(t, &self.target.source));
            let outcome = match (&table, ready) {
                (Some(t), Some(ServedZone::Forward(zone))) => {
                    Some(self.sync(t, &zone, changed.as_ref(), &leading).await)
                }
                // No table yet, or the source zone is not ready (a source has not listed:
                // writing now would delete what it lacks).
                _ => None,
            };
            match outcome {
                Some(Ok(())) => {
                    changed = Some(FxHashSet::default());
                    backoff = FIRST_BACKOFF;
                    self.set_in_sync(true);
                }
                Some(Err(Stopped::NotLeading)) => continue,
                Some(Err(Stopped::Failed)) => {
                    self.set_in_sync(false);
                    tokio::select! {
                        () = tokio::time::sleep(backoff) => {}
                        () = leadership_changes(&mut leading) => {}
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
                None => {}
            }
            tokio::select! {
                () = self.feed.wake.notified() => {}
                () = leadership_changes(&mut leading) => {}
            }
        }
    }

    /// While another agent writes: notes the names of each table until leadership changes;
    /// false once no more word on it can come.
    async fn follow(&mut self, leading: &mut watch::Receiver<bool>) -> bool {
        let feed = self.feed.clone();
        loop {
            tokio::select! {
                changed = leading.changed() => return changed.is_ok(),
                () = feed.wake.notified() => {
                    if let (Some(table), changed) = self.take() {
                        self.note_seen(&table, changed.as_ref());
                    }
                }
            }
        }
    }

    /// Notes the names of the source zone with addresses among `changed` (None: all) in
    /// `table`, when every name is managed.
    fn note_seen(&mut self, table: &RecordTable, changed: Option<&FxHashSet<WireName>>) {
        if self.target.names.is_some() {
            return;
        }
        let Some(ServedZone::Forward(zone)) = ServedZone::find(table, &self.target.source) else {
            return;
        };
        let has_addresses = |name: &Name| !current(table, &zone, name, None).is_empty();
        match changed {
            Some(changed) => self.seen.extend(
                changed
                    .iter()
                    .map(WireName::to_name)
                    .filter(|n| has_addresses(n)),
            ),
            None => self.seen.extend(names_with_addresses(table, &zone)),
        }
    }

    /// The newest table and the names changed since the last take.
    fn take(&self) -> (Option<Arc<RecordTable>>, Option<FxHashSet<WireName>>) {
        let mut pending = self.feed.pending.lock().unwrap_or_else(|e| e.into_inner());
        let table = pending.table.clone();
        let changed = pending.changed.replace(FxHashSet::default());
        (table, changed)
    }

    fn set_in_sync(&self, value: bool) {
        self.metrics
            .in_sync
            .get_or_create(&TargetLabel {
                target: self.label.clone(),
            })
            .set(i64::from(value));
    }

    /// Brings the target to `table`'s content for the names `changed` (None: every managed
    /// name) and the names not known. Names whose prerequisites failed go again at once,
    /// without prerequisites (a second round).
    async fn sync(
        &mut self,
        table: &RecordTable,
        zone: &Zone,
        changed: Option<&FxHashSet<WireName>>,
        leading: &watch::Receiver<bool>,
    ) -> Result<(), Stopped> {
        let none = FxHashSet::default();
        let mut changed = changed;
        for _round in 0..2 {
            let updates = self.updates(table, zone, changed);
            let mut prerequisite_failed = false;
            // A refusal may be the policy's for some names (BIND's update-policy grants names):
            // the other batches still go, and the sync is retried as failed.
            let mut refused = false;
            let all = batches(&self.target.zone, updates, rand_id);
            let mut left: Vec<Vec<Name>> = all.iter().map(|b| b.keys.clone()).collect();
            left.reverse();
            for batch in all {
                left.pop();
                if !*leading.borrow() {
                    return Err(Stopped::NotLeading);
                }
                match self.send(batch.message).await {
                    Outcome::Applied => {
                        for name in batch.keys {
                            self.applied(table, zone, name);
                        }
                    }
                    Outcome::PrerequisiteFailed(rcode) => {
                        info!(target = %self.label, names = batch.keys.len(), %rcode, "a prerequisite failed (the names were changed by someone else): sending them whole");
                        self.mark_unknown(batch.keys);
                        prerequisite_failed = true;
                    }
                    Outcome::Refused => {
                        self.mark_unknown(batch.keys);
                        refused = true;
                    }
                    Outcome::NotAuthorized(_) | Outcome::Failed(_) => {
                        self.mark_unknown(batch.keys);
                        for keys in left {
                            self.mark_unknown(keys);
                        }
                        return Err(Stopped::Failed);
                    }
                }
            }
            if refused {
                return Err(Stopped::Failed);
            }
            if !prerequisite_failed {
                self.unknown = Unknown::Names(BTreeSet::new());
                return Ok(());
            }
            changed = Some(&none);
        }
        Err(Stopped::Failed)
    }

    /// Each name's update, with the name in the source zone.
    fn updates(
        &self,
        table: &RecordTable,
        zone: &Zone,
        changed: Option<&FxHashSet<WireName>>,
    ) -> Vec<(Name, plan::NameUpdate)> {
        let mut updates = Vec::new();
        for name in self.names_to_compare(table, zone, changed) {
            let Some(owner) = self.target.target_name(&name) else {
                continue;
            };
            let after = current(table, zone, &name, self.target.ttl);
            let before = if self.is_unknown(&name) {
                None
            } else {
                Some(self.written.get(&name).cloned().unwrap_or_default())
            };
            if let Some(update) = name_update(&owner, before.as_ref(), &after) {
                updates.push((name, update));
            }
        }
        updates
    }

    fn is_unknown(&self, name: &Name) -> bool {
        match &self.unknown {
            Unknown::All => true,
            Unknown::Names(names) => names.contains(name),
        }
    }

    fn mark_unknown(&mut self, names: Vec<Name>) {
        if let Unknown::Names(unknown) = &mut self.unknown {
            unknown.extend(names);
        }
    }

    /// `name` now holds what `table` has.
    fn applied(&mut self, table: &RecordTable, zone: &Zone, name: Name) {
        if let Unknown::Names(unknown) = &mut self.unknown {
            unknown.remove(&name);
        }
        let now = current(table, zone, &name, self.target.ttl);
        if now.is_empty() {
            self.seen.remove(&name);
            self.written.remove(&name);
        } else {
            self.written.insert(name, now);
        }
    }

    /// The names of the source zone to compare: the changed ones among those managed and the
    /// ones not known; every managed name when any may have changed or none is known.
    fn names_to_compare(
        &self,
        table: &RecordTable,
        zone: &Zone,
        changed: Option<&FxHashSet<WireName>>,
    ) -> BTreeSet<Name> {
        let mut names: BTreeSet<Name> = BTreeSet::new();
        let every = changed.is_none() || matches!(self.unknown, Unknown::All);
        match &self.target.names {
            Some(listed) => {
                let listed = listed.iter();
                if every {
                    names.extend(listed.cloned());
                } else if let Some(changed) = changed {
                    names.extend(
                        listed
                            .filter(|n| changed.contains(&WireName::from_name(n)))
                            .cloned(),
                    );
                }
            }
            None => {
                if every {
                    names.extend(names_with_addresses(table, zone));
                } else if let Some(changed) = changed {
                    names.extend(changed.iter().map(WireName::to_name));
                }
                // Names written before (by this agent, or seen with addresses while another
                // may have written them) and gone since.
                names.extend(self.written.keys().cloned());
                if every {
                    names.extend(self.seen.iter().cloned());
                }
                names.retain(|n| self.target.target_name(n).is_some());
            }
        }
        if let Unknown::Names(unknown) = &self.unknown {
            names.extend(unknown.iter().cloned());
        }
        names
    }

    /// Sends one message, counts and logs how it went.
    async fn send(&self, message: hickory_proto::op::Message) -> Outcome {
        let signer = match &self.target.key {
            Some(key) => {
                let signer = self
                    .keys
                    .as_ref()
                    .and_then(|t| t.keys.load().get(key).cloned());
                if signer.is_none() {
                    error!(target = %self.label, key = %key, "the TSIG key is not loaded: no UPDATE sent");
                    return Outcome::Failed("key not loaded".into());
                }
                signer
            }
            None => None,
        };
        let records = message.answers.len() + message.authorities.len();
        let outcome = sender::exchange(self.target.server, signer.as_ref(), message).await;
        self.metrics
            .messages
            .get_or_create(&ResultLabels {
                target: self.label.clone(),
                result: outcome.label().to_owned(),
            })
            .inc();
        let key = self.target.key.as_ref().map(|k| k.to_ascii());
        let zone = self.target.zone.to_ascii();
        let server = self.target.server;
        match &outcome {
            Outcome::Applied => {
                debug!(target = %self.label, records, "UPDATE applied")
            }
            Outcome::PrerequisiteFailed(_) => {}
            Outcome::NotAuthorized(why) => {
                error!(%server, zone, ?key, answer = %why, "UPDATE not authorized: the primary does not accept the key (wrong secret, unknown name or algorithm, or clocks apart)")
            }
            Outcome::Refused => {
                error!(%server, zone, ?key, "UPDATE refused: the primary does not allow this key (or address) to update the zone (allow-update / update-policy)")
            }
            Outcome::Failed(why) => {
                warn!(%server, zone, ?key, error = %why, "UPDATE failed; retrying")
            }
        }
        outcome
    }
}

/// Returns when leadership changes; never once no more word can come (the last one stands).
async fn leadership_changes(leading: &mut watch::Receiver<bool>) {
    if leading.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Every name of `zone` in `table` with A or AAAA records.
fn names_with_addresses<'a>(
    table: &'a RecordTable,
    zone: &'a Zone,
) -> impl Iterator<Item = Name> + 'a {
    table
        .nodes()
        .filter(|(_, node)| node.zone == zone.id && (!node.a.is_empty() || !node.aaaa.is_empty()))
        .map(|(name, _)| name.to_name())
}

/// What `table` holds at `name` in `zone`, with the TTL `ttl` (None: the records' own).
fn current(table: &RecordTable, zone: &Zone, name: &Name, ttl: Option<u32>) -> Rrsets {
    match table.node(name).filter(|n| n.zone == zone.id) {
        Some(node) if !node.a.is_empty() || !node.aaaa.is_empty() => Rrsets {
            ttl: ttl.unwrap_or_else(|| node.ttl_in(zone)),
            a: node.a.to_vec(),
            aaaa: node.aaaa.to_vec(),
        },
        _ => Rrsets::default(),
    }
}

/// A message ID no off-path sender can guess.
fn rand_id() -> u16 {
    hostport_dns_core::cookies::random_u64() as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::{
        op::{Message, MessageType, OpCode, ResponseCode},
        rr::{DNSClass, RecordType},
        serialize::binary::BinDecodable,
    };
    use hostport_dns_core::{
        records::{RecordData, SourceRecord},
        table::TableBuilder,
        zone::ZoneSpec,
    };
    use tokio::{
        io::{AsyncReadExt, AsyncWriteExt},
        net::TcpListener,
    };

    type Received = Arc<Mutex<Vec<Message>>>;

    /// A primary that answers every UPDATE NOERROR and keeps what it got.
    async fn primary() -> (std::net::SocketAddr, Received) {
        primary_refusing(None).await
    }

    /// [`primary`], answering REFUSED to a message that names `refused` (its policy).
    async fn primary_refusing(refused: Option<&'static str>) -> (std::net::SocketAddr, Received) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("an address");
        let received: Received = Arc::default();
        let kept = received.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let len = stream.read_u16().await.expect("a length");
                let mut bytes = vec![0; usize::from(len)];
                stream.read_exact(&mut bytes).await.expect("a message");
                let message = Message::from_bytes(&bytes).expect("an UPDATE");
                let mut answer =
                    Message::new(message.metadata.id, MessageType::Response, OpCode::Update);
                let refuse = refused.is_some_and(|name| {
                    message
                        .authorities
                        .iter()
                        .any(|r| r.name.to_ascii() == name)
                });
                answer.metadata.response_code = if refuse {
                    ResponseCode::Refused
                } else {
                    ResponseCode::NoError
                };
                kept.lock().unwrap().push(message);
                let answer = answer.to_vec().expect("encodes");
                let mut framed = (answer.len() as u16).to_be_bytes().to_vec();
                framed.extend(answer);
                stream.write_all(&framed).await.expect("answered");
            }
        });
        (addr, received)
    }

    fn record(name: &str, address: [u8; 4]) -> SourceRecord {
        let name = Name::from_ascii(name).expect("a name");
        SourceRecord::new(&name, None, RecordData::A(address.into()))
    }

    /// Waits for the primary to have received `count` messages.
    async fn received(received: &Received, count: usize) -> Vec<Message> {
        for _ in 0..500 {
            let now = received.lock().unwrap().clone();
            if now.len() >= count {
                return now;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{count} UPDATEs never arrived");
    }

    /// (class, type) of each record of a section.
    fn kinds(records: &[hickory_proto::rr::Record]) -> Vec<(DNSClass, RecordType)> {
        records
            .iter()
            .map(|r| (r.dns_class, r.record_type()))
            .collect()
    }

    /// A writer of every name of `example.` into `corp.example.` at `server`, leading from the
    /// start or not, and a builder of the tables it follows.
    fn writer(
        server: std::net::SocketAddr,
        leading: bool,
    ) -> (Arc<Updates>, watch::Sender<bool>, TableBuilder) {
        let target = UpdateTarget {
            server,
            zone: Name::from_ascii("corp.example.").unwrap(),
            source: Name::from_ascii("example.").unwrap(),
            names: None,
            key: None,
            ttl: None,
        };
        let updates = Arc::new(Updates::new(vec![target]));
        let (leading_tx, leading) = watch::channel(leading);
        updates.spawn(None, leading);
        let zone = ZoneSpec::with_defaults(Name::from_ascii("example.").unwrap());
        let (builder, _) = TableBuilder::new(&[zone]);
        (updates, leading_tx, builder)
    }

    #[tokio::test]
    async fn nothing_is_written_until_leading_and_each_leadership_starts_with_every_name_whole() {
        let (server, got) = primary().await;
        let (updates, leading_tx, mut builder) = writer(server, false);
        builder.add(&[record("api.example.", [198, 18, 0, 1])]);
        builder.finish();
        updates.record(&Arc::new(builder.table().clone()), None);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(got.lock().unwrap().is_empty(), "written while not leading");

        // Leading: api written whole, without prerequisites.
        leading_tx.send_replace(true);
        let first = received(&got, 1).await;
        assert!(first[0].answers.is_empty());
        assert_eq!(
            kinds(&first[0].authorities),
            [
                (DNSClass::ANY, RecordType::A),
                (DNSClass::IN, RecordType::A),
                (DNSClass::ANY, RecordType::AAAA)
            ]
        );
        assert_eq!(first[0].authorities[1].name.to_ascii(), "api.corp.example.");

        // A change: the difference, under the last written RRset.
        builder.remove([&record("api.example.", [198, 18, 0, 1])]);
        builder.add([&record("api.example.", [198, 18, 0, 2])]);
        let changed = builder.finish();
        updates.record(&Arc::new(builder.table().clone()), Some(&changed));
        let second = received(&got, 2).await;
        assert_eq!(kinds(&second[1].answers), [(DNSClass::IN, RecordType::A)]);
        assert_eq!(
            kinds(&second[1].authorities),
            [
                (DNSClass::NONE, RecordType::A),
                (DNSClass::IN, RecordType::A)
            ]
        );

        // Leadership lost and regained: whole again, though nothing changed.
        let in_sync = || {
            updates
                .metrics
                .in_sync
                .get_or_create(&TargetLabel {
                    target: format!("corp.example.@{server}"),
                })
                .get()
        };
        assert_eq!(in_sync(), 1);
        leading_tx.send_replace(false);
        // Seen by the task (it says it is no longer in sync) before leading again.
        while in_sync() != 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        leading_tx.send_replace(true);
        let third = received(&got, 3).await;
        assert!(third[2].answers.is_empty());
        assert_eq!(
            kinds(&third[2].authorities)[0],
            (DNSClass::ANY, RecordType::A)
        );
        assert_eq!(third.len(), 3);
    }

    /// A name another leader wrote and that went while this agent followed is deleted when
    /// this agent leads (every name managed, so nothing lists it).
    #[tokio::test]
    async fn a_name_gone_while_following_is_deleted_on_taking_over() {
        let (server, got) = primary().await;
        let (updates, leading_tx, mut builder) = writer(server, false);
        builder.add(&[
            record("api.example.", [198, 18, 0, 1]),
            record("old.example.", [198, 18, 0, 9]),
        ]);
        builder.finish();
        updates.record(&Arc::new(builder.table().clone()), None);
        // The follower takes each table as it comes (its wake is not lost).
        tokio::time::sleep(Duration::from_millis(100)).await;
        builder.remove([&record("old.example.", [198, 18, 0, 9])]);
        let changed = builder.finish();
        updates.record(&Arc::new(builder.table().clone()), Some(&changed));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(got.lock().unwrap().is_empty(), "written while not leading");

        leading_tx.send_replace(true);
        let sent = received(&got, 1).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let sent_names: BTreeSet<String> = got
            .lock()
            .unwrap()
            .iter()
            .flat_map(|m| m.authorities.iter().map(|r| r.name.to_ascii()))
            .collect();
        assert!(
            sent_names.contains("old.corp.example."),
            "the gone name is deleted: {sent_names:?} in {sent:?}"
        );
        let old_records: Vec<(DNSClass, RecordType)> = got
            .lock()
            .unwrap()
            .iter()
            .flat_map(|m| m.authorities.clone())
            .filter(|r| r.name.to_ascii() == "old.corp.example.")
            .map(|r| (r.dns_class, r.record_type()))
            .collect();
        assert_eq!(
            old_records,
            [
                (DNSClass::ANY, RecordType::A),
                (DNSClass::ANY, RecordType::AAAA)
            ],
            "deleted, nothing added"
        );
    }

    /// A batch the primary refuses (its policy for one name) does not hold back the others.
    #[tokio::test]
    async fn a_refused_batch_does_not_hold_back_the_next() {
        let (server, got) = primary_refusing(Some("a0.corp.example.")).await;
        let (updates, _leading_tx, mut builder) = writer(server, true);
        let mut records = vec![record("a0.example.", [198, 18, 0, 1])];
        records.extend(
            (0..plan::MAX_NAMES as u8)
                .map(|i| record(&format!("n{i:02}.example."), [198, 18, 1, i])),
        );
        builder.add(&records);
        builder.finish();
        updates.record(&Arc::new(builder.table().clone()), None);
        let sent = received(&got, 2).await;
        let last_batch: Vec<String> = sent[1]
            .authorities
            .iter()
            .map(|r| r.name.to_ascii())
            .collect();
        assert!(
            last_batch.contains(&"n31.corp.example.".to_owned()),
            "the batch after the refused one went: {last_batch:?}"
        );
    }
}
