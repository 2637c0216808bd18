//! The kernel table's size follows the names served: it starts small and grows (or shrinks) by
//! size classes (`Capacity::resized`), up to `--kernel-names`.
//!
//! The table's maps are arrays, whose lookups the verifier inlines, and an array's size is fixed
//! when it is made. So a table of another size is a new program with maps of its own: loaded
//! beside the one answering, written whole, leased, then put on every interface in one atomic
//! link update per interface. Every packet meets one program or the other, each reading its own
//! complete table; the previous maps are never written again, so a run still inside them
//! finishes on a consistent table. The design, and why it beats an array of maps, is in
//! `hostport_dns_common::generation` ("Sizes").

use std::sync::{Arc, Mutex};

use hostport_dns_common::generation::{Capacity, EntryCounts};

use crate::{
    metrics::Metrics,
    xdp::{
        Dataplane, XdpError,
        counters::Counters,
        hostset::HostAddresses,
        lease::{Lease, NextLease},
        pins::PinDir,
        writer::MapWriter,
        writer_thread::Resize,
    },
};

/// The loaded program, once there is one (dropped when the agent stops: that detaches it unless
/// its links are pinned).
pub type Held = Arc<Mutex<Option<Dataplane>>>;

/// Loads the program with a table of the given capacity, its maps pinned in the given directory
/// (if any), as the first one was loaded.
pub type Load = Box<dyn Fn(Option<PinDir>, Capacity) -> Result<Dataplane, XdpError> + Send>;

/// The agent's [`Resize`]: loads a program of the new size the way the first one was loaded.
pub struct Resizer {
    load: Load,
    /// Names each kind of entry may grow to (`--kernel-names`).
    limit: u32,
    /// The program answering now (or about to be attached).
    held: Held,
    metrics: Arc<Metrics>,
    /// The pinned table's lease, handed to each new table.
    lease: Option<Lease>,
    /// What [`Resize::load`] made, until it answers or is let go.
    loaded: Option<Loaded>,
}

/// A program loaded with fresh maps, not answering yet.
struct Loaded {
    dataplane: Dataplane,
    counters: Counters,
    lease: Option<NextLease>,
}

impl Resizer {
    pub fn new(
        load: Load,
        limit: u32,
        held: Held,
        metrics: Arc<Metrics>,
        lease: Option<Lease>,
    ) -> Self {
        Self {
            load,
            limit,
            held,
            metrics,
            lease,
            loaded: None,
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Option<Dataplane>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Resize for Resizer {
    fn wanted(
        &self,
        current: Capacity,
        needs: &EntryCounts,
        host: &HostAddresses,
    ) -> Option<Capacity> {
        let addresses = u32::try_from(host.len()).unwrap_or(u32::MAX);
        current.resized(*needs, addresses, self.limit)
    }

    fn load(&mut self, capacity: Capacity) -> Result<MapWriter, String> {
        // The new program's maps are pinned in the same directory (replacing the previous
        // pins: the previous program keeps its maps through its own references).
        let pins = match self.held().as_ref().and_then(|d| d.pins.as_ref()) {
            Some(pins) => Some(pins.try_clone().map_err(|e| e.to_string())?),
            None => None,
        };
        let mut dataplane = (self.load)(pins, capacity).map_err(|e| e.to_string())?;
        // Before the writer takes `HPD_GEN`.
        let lease = match self.lease {
            Some(_) => Some(Lease::prepare(&dataplane.ebpf).map_err(|e| e.to_string())?),
            None => None,
        };
        let writer = MapWriter::new(&mut dataplane.ebpf, capacity).map_err(|e| e.to_string())?;
        let counters = Counters::new(&mut dataplane.ebpf, writer.zone_counters().names())
            .map_err(|e| e.to_string())?;
        self.loaded = Some(Loaded {
            dataplane,
            counters,
            lease,
        });
        Ok(writer)
    }

    fn commit(&mut self) -> Result<(), String> {
        let Loaded {
            mut dataplane,
            counters,
            lease,
        } = self
            .loaded
            .take()
            .ok_or_else(|| "no table was loaded".to_owned())?;
        // Leased before it answers: a pinned program never answers without a lease.
        let previous_lease = match (&self.lease, lease) {
            (Some(current), Some(next)) => Some(
                current
                    .hand_over(next)
                    .map_err(|e| format!("cannot lease the new table: {e}"))?,
            ),
            _ => None,
        };
        let capacity = dataplane.capacity;
        let mut held = self.held();
        if let Some(previous) = held.as_mut()
            && let Err(err) = dataplane.take_over(previous)
        {
            if let (Some(current), Some(previous)) = (&self.lease, previous_lease)
                && let Err(error) = current.hand_over(previous)
            {
                tracing::warn!(%error, "cannot lease the previous table again");
            }
            return Err(format!("cannot put the new program in place: {err}"));
        }
        // The previous program is unloaded once no link holds it; its maps go with it (and
        // with the writer's mappings, dropped next).
        *held = Some(dataplane);
        drop(held);
        self.metrics.install_xdp_counters(counters);
        self.metrics.set_xdp_table_size(&capacity);
        self.metrics.xdp_table_resizes.inc();
        Ok(())
    }

    fn abandon(&mut self) {
        self.loaded = None;
    }
}
