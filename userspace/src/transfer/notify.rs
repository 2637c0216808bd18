//! NOTIFY (RFC 1996) to the configured secondaries: whenever a zone's serial changes (and for
//! every zone once the first table is published), each secondary of the zone (its `zones`, by
//! default the forward zones and the configured reverse zones; a catalog consumer's: every zone
//! and the catalog) gets a NOTIFY for the zone,
//! signed with its key if it has one, with the new SOA in the answer section (§3.7). A NOTIFY
//! without an acknowledgement (a NOERROR answer, with a valid TSIG if signed) is sent again
//! 1, 2, 4, 8 and 16 seconds after the attempt before it, then given up; a newer serial of the same zone replaces a
//! NOTIFY still being retried.

use std::{
    collections::HashMap,
    net::{Ipv4Addr, Ipv6Addr, SocketAddr},
    sync::Arc,
    time::Duration,
};

use hickory_proto::{
    op::{Message, MessageType, OpCode, Query, ResponseCode},
    rr::{Name, RecordType, TSigner},
    serialize::binary::BinDecodable,
};
use tokio::{net::UdpSocket, sync::watch, task::JoinHandle};
use tracing::{debug, info, warn};

use super::{
    Transfers,
    config::NotifyTarget,
    stats::NotifyOutcome,
    tsig::{self, unix_now},
    zone_data::ServedZone,
};
use hostport_dns_core::table::RecordTable;

/// How long the first attempt waits for its answer; each retry waits twice as long.
const FIRST_WAIT: Duration = Duration::from_secs(1);
/// Attempts in all (the first and the retries).
const ATTEMPTS: u32 = 6;
/// The largest answer read.
const ANSWER_BUFFER: usize = 4096;

/// Sends NOTIFYs for every table published through `tables` until the sender is gone.
pub async fn run(transfers: Arc<Transfers>, mut tables: watch::Receiver<Option<Arc<RecordTable>>>) {
    if transfers.config.notify.is_empty() {
        return;
    }
    let mut notified: HashMap<Name, u32> = HashMap::new();
    let mut sending: HashMap<(Name, SocketAddr), JoinHandle<()>> = HashMap::new();
    loop {
        let table = tables.borrow_and_update().clone();
        if let Some(table) = table {
            for zone in ServedZone::all(&table) {
                let apex = zone.apex().clone();
                if notified.get(&apex) == Some(&zone.serial()) {
                    continue;
                }
                notified.insert(apex.clone(), zone.serial());
                let reverse = matches!(zone, ServedZone::Reverse(..));
                let configured = table.reverse_zones_configured();
                for target in &transfers.config.notify {
                    // The catalog goes to its consumers (and to a secondary listing it), never
                    // to one that serves only its zones.
                    let wanted = match zone {
                        ServedZone::Catalog(_) => {
                            target.catalog
                                || target.zones.as_ref().is_some_and(|z| z.contains(&apex))
                        }
                        _ => target.wants(&apex, reverse, configured),
                    };
                    if !wanted {
                        continue;
                    }
                    let signer = target
                        .key
                        .as_ref()
                        .and_then(|k| transfers.keys.load().get(k).cloned());
                    let task = tokio::spawn(notify(
                        transfers.clone(),
                        target.clone(),
                        signer,
                        zone.clone(),
                    ));
                    if let Some(previous) = sending.insert((apex.clone(), target.address), task) {
                        previous.abort();
                    }
                }
            }
            sending.retain(|_, task| !task.is_finished());
        }
        if tables.changed().await.is_err() {
            return;
        }
    }
}

/// Notifies `target` of `zone`'s serial, retrying until it acknowledges or the attempts run out.
async fn notify(
    transfers: Arc<Transfers>,
    target: NotifyTarget,
    signer: Option<TSigner>,
    zone: ServedZone,
) {
    let mut wait = FIRST_WAIT;
    for attempt in 1..=ATTEMPTS {
        let sent = tokio::time::Instant::now();
        match exchange(&target, signer.as_ref(), &zone, wait).await {
            Ok(()) => {
                debug!(secondary = %target.address, zone = %zone.apex(), serial = zone.serial(), attempt, "NOTIFY acknowledged");
                transfers.stats.notified(NotifyOutcome::Acknowledged);
                return;
            }
            Err(err) if attempt < ATTEMPTS => {
                info!(secondary = %target.address, zone = %zone.apex(), serial = zone.serial(), attempt, %err, "NOTIFY not acknowledged; sending again");
                transfers.stats.notified(NotifyOutcome::Retried);
                // An error comes back at once (a port unreachable, an error rcode): the next
                // attempt still waits its turn, so that a restarting secondary gets the retries.
                tokio::time::sleep_until(sent + wait).await;
                wait *= 2;
            }
            Err(err) => {
                warn!(secondary = %target.address, zone = %zone.apex(), serial = zone.serial(), %err, "NOTIFY never acknowledged; the secondary learns of the change at its next refresh");
                transfers.stats.notified(NotifyOutcome::Failed);
            }
        }
    }
}

/// One NOTIFY and its answer, within `wait`.
async fn exchange(
    target: &NotifyTarget,
    signer: Option<&TSigner>,
    zone: &ServedZone,
    wait: Duration,
) -> anyhow::Result<()> {
    let id: u16 = rand_id();
    let mut message = Message::new(id, MessageType::Query, OpCode::Notify);
    message.metadata.authoritative = true;
    let mut question = Query::query(zone.apex().clone(), RecordType::SOA);
    question.set_query_class(hickory_proto::rr::DNSClass::IN);
    message.add_query(question);
    message.add_answer(zone.soa());
    let now = unix_now();
    let (bytes, request_mac) = match signer {
        Some(signer) => {
            let (bytes, mac) = tsig::sign_request(signer, message, now)?;
            (bytes, Some(mac))
        }
        None => (message.to_vec()?, None),
    };
    let local: SocketAddr = if target.address.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = UdpSocket::bind(local).await?;
    socket.connect(target.address).await?;
    socket.send(&bytes).await?;
    let mut buf = vec![0u8; ANSWER_BUFFER];
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let len = tokio::time::timeout_at(deadline, socket.recv(&mut buf))
            .await
            .map_err(|_| anyhow::anyhow!("no answer within {wait:?}"))??;
        let answer = &buf[..len];
        let Ok(parsed) = Message::from_bytes(answer) else {
            continue;
        };
        if parsed.metadata.id != id
            || parsed.metadata.message_type != MessageType::Response
            || parsed.metadata.op_code != OpCode::Notify
        {
            continue;
        }
        if let (Some(signer), Some(mac)) = (signer, &request_mac) {
            tsig::verify_response(signer, answer, mac, unix_now())?;
        }
        return match parsed.metadata.response_code {
            ResponseCode::NoError => Ok(()),
            rcode => Err(anyhow::anyhow!("answered {rcode}")),
        };
    }
}

/// A message ID no off-path sender can guess.
fn rand_id() -> u16 {
    hostport_dns_core::cookies::random_u64() as u16
}
