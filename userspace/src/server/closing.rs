//! Stopping without dropping work. A rolling update starts the new agent beside the old one (the
//! sockets are SO_REUSEPORT groups); when the old one is told to stop, it leaves the groups before
//! it lets go of anything, so that new queries reach the new agent while it answers those it
//! already holds: UDP sockets are connected to a peer that never sends (the kernel's reuse-port
//! selection skips connected sockets, since Linux 5.2) and drained, TCP listeners closed, idle
//! connections closed between queries, busy ones given a moment to finish.

use tokio::sync::watch;

/// Whether the agent is stopping; the server's threads and tasks watch it.
#[derive(Default)]
pub struct Closing {
    closing: watch::Sender<bool>,
}

impl Closing {
    /// The agent stops: stop taking new work, finish what is held.
    pub fn start(&self) {
        self.closing.send_replace(true);
    }

    pub fn is_closing(&self) -> bool {
        *self.closing.borrow()
    }

    /// Returns once the agent stops.
    pub async fn wait(&self) {
        let mut closing = self.closing.subscribe();
        let _ = closing.wait_for(|c| *c).await;
    }
}
