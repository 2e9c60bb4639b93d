//! Whether the `ib-udp` port's link is up (AE-01: the port active / port
//! error async events, and the port state QUERY_PORT reports).
//!
//! A UDP "link" has no carrier to lose: the port is up while it hears from the
//! fabric. Every node sends a keepalive datagram to every other node of the
//! fabric file each [`BEAT`], and takes any datagram from a fabric node (a
//! keepalive or a packet) as a sign of life; after [`DEAD_AFTER`] without one
//! the port is down (as a real port whose link partner is gone), and the first
//! datagram heard brings it up again. A fabric of one node is always up.
//!
//! A keepalive is [`KEEPALIVE`], 8 bytes: shorter than any packet
//! (`MIN_PACKET_LEN`), so it cannot be taken for one, and a node that does not
//! know it drops it as short. It is not authenticated by the fabric key: it
//! only says "up", and only from an address of the fabric file.

use std::net::SocketAddr;
use std::time::Duration;

/// The keepalive datagram.
pub const KEEPALIVE: &[u8; 8] = b"VHCAlive";

/// How often a node says it is alive.
pub const BEAT: Duration = Duration::from_secs(1);

/// Silence after which the port is down: five beats, so lost keepalives or
/// a peer descheduled for seconds (two TCG guests on two CPUs) do not flap
/// the port.
pub const DEAD_AFTER: Duration = Duration::from_secs(5);

/// What the liveness check did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LivenessCounters {
    pub keepalives_sent: u64,
    pub keepalives_received: u64,
    /// Up -> down transitions (port error events).
    pub went_down: u64,
    /// Down -> up transitions (port active events).
    pub came_up: u64,
}

/// The liveness state of one port.
#[derive(Debug, Clone)]
pub struct Liveness {
    peers: Vec<SocketAddr>,
    beat: Duration,
    dead_after: Duration,
    /// When a fabric node was last heard (the first tick counts as heard: a
    /// port starts up and gives its peers time to start).
    last_heard: Option<Duration>,
    next_beat: Option<Duration>,
    up: bool,
    /// The SM set PortPhysicalState Disabled (IBA 14.2.5.6): the PHY is off,
    /// so no keepalive goes out and nothing heard counts.
    disabled: bool,
    pub counters: LivenessCounters,
}

impl Liveness {
    /// Liveness toward `peers` (every other node of the fabric).
    pub fn new(peers: Vec<SocketAddr>, beat: Duration, dead_after: Duration) -> Liveness {
        Liveness {
            peers,
            beat,
            dead_after,
            last_heard: None,
            next_beat: None,
            up: true,
            disabled: false,
            counters: LivenessCounters::default(),
        }
    }

    /// Liveness that never ticks and stays up (no keepalives sent): for a
    /// link whose port state is not wanted (tests of other deadlines).
    pub fn off() -> Liveness {
        Liveness::new(Vec::new(), BEAT, DEAD_AFTER)
    }

    /// The addresses keepalives go to.
    pub fn peers(&self) -> &[SocketAddr] {
        &self.peers
    }

    /// Whether `datagram` is a keepalive.
    pub fn is_keepalive(datagram: &[u8]) -> bool {
        datagram == KEEPALIVE
    }

    /// A datagram came from a fabric node at `now`.
    pub fn heard(&mut self, now: Duration) {
        if self.disabled {
            return;
        }
        self.last_heard = Some(self.last_heard.map_or(now, |t| t.max(now)));
        if !self.up {
            self.up = true;
            self.counters.came_up += 1;
        }
    }

    /// Advances to `now`: the port goes down after [`DEAD_AFTER`] of silence.
    /// Returns whether keepalives are due (the caller sends one to each peer).
    pub fn tick(&mut self, now: Duration) -> bool {
        if self.peers.is_empty() || self.disabled {
            return false;
        }
        let heard = *self.last_heard.get_or_insert(now);
        if self.up && now >= heard + self.dead_after {
            self.up = false;
            self.counters.went_down += 1;
        }
        match self.next_beat {
            Some(t) if now < t => false,
            _ => {
                self.next_beat = Some(now + self.beat);
                true
            }
        }
    }

    /// When [`Liveness::tick`] has work next: a beat, or the port's death.
    pub fn deadline(&self) -> Option<Duration> {
        if self.peers.is_empty() || self.disabled {
            return None;
        }
        let Some(beat) = self.next_beat else {
            return Some(Duration::ZERO); // never ticked: at once
        };
        let death = self
            .last_heard
            .filter(|_| self.up)
            .map(|t| t + self.dead_after);
        Some(death.map_or(beat, |d| d.min(beat)))
    }

    /// Down until [`Liveness::heard`]: a port that has no link until its
    /// partner is heard (a switch port).
    pub fn set_down(&mut self) {
        self.up = false;
    }

    /// Whether the port is up.
    pub fn is_up(&self) -> bool {
        self.up
    }

    /// The SM disabled the port (IBA 14.2.5.6 PortPhysicalState 3): down, no
    /// keepalives, deaf, so the link partner goes down after its silence; or
    /// set it Polling again: still down, a keepalive at once, and up when the
    /// partner is heard (the link trains).
    pub fn set_disabled(&mut self, disabled: bool) {
        if disabled == self.disabled {
            return;
        }
        self.disabled = disabled;
        if disabled && self.up {
            self.counters.went_down += 1;
        }
        // With no one to hear (a fabric of one node, or liveness off) the
        // link is up again as soon as it is enabled: nothing would bring it up.
        self.up = !disabled && self.peers.is_empty();
        if self.up {
            self.counters.came_up += 1;
        }
        self.last_heard = None;
        self.next_beat = None;
    }

    /// Whether the SM disabled the port.
    pub fn is_disabled(&self) -> bool {
        self.disabled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn ae_01_down_after_silence_up_when_heard() {
        let peer: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let mut l = Liveness::new(vec![peer], S, 3 * S);
        let t0 = Duration::from_secs(1000);
        assert_eq!(l.deadline(), Some(Duration::ZERO));
        assert!(l.tick(t0), "the first beat at once");
        assert!(!l.tick(t0 + S / 2));
        assert_eq!(l.deadline(), Some(t0 + S));
        assert!(l.tick(t0 + S));
        l.heard(t0 + S);
        assert!(l.is_up());
        assert!(l.tick(t0 + 2 * S));
        assert!(l.tick(t0 + 3 * S));
        assert!(l.is_up(), "2 s of silence is not death");
        assert!(l.tick(t0 + 4 * S));
        assert!(!l.is_up(), "3 s is");
        assert_eq!(l.counters.went_down, 1);
        assert_eq!(l.deadline(), Some(t0 + 5 * S), "beats go on while down");
        l.heard(t0 + 9 * S / 2);
        assert!(l.is_up());
        assert_eq!(l.counters.came_up, 1);
        assert_eq!(l.deadline(), Some(t0 + 5 * S));
    }

    #[test]
    fn ae_01_a_disabled_port_is_down_silent_and_deaf_until_polling() {
        let peer: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let mut l = Liveness::new(vec![peer], S, 3 * S);
        let t0 = Duration::from_secs(1000);
        assert!(l.tick(t0));
        l.heard(t0);
        l.set_disabled(true);
        assert!(!l.is_up() && l.is_disabled());
        assert_eq!(l.counters.went_down, 1);
        assert_eq!(
            l.deadline(),
            None,
            "no keepalive to send, no death to wait for"
        );
        assert!(!l.tick(t0 + 10 * S), "no keepalives");
        l.heard(t0 + 10 * S);
        assert!(!l.is_up(), "deaf");
        assert_eq!(l.counters.came_up, 0);
        // Polling: a keepalive at once, up when the partner is heard.
        l.set_disabled(false);
        assert!(!l.is_up());
        assert_eq!(l.deadline(), Some(Duration::ZERO));
        assert!(l.tick(t0 + 11 * S));
        assert!(!l.is_up(), "not before the partner is heard");
        l.heard(t0 + 11 * S);
        assert!(l.is_up());
        assert_eq!(l.counters.came_up, 1);
    }

    #[test]
    fn ae_01_a_single_node_fabric_is_always_up() {
        let mut l = Liveness::new(vec![], S, 3 * S);
        assert!(!l.tick(Duration::from_secs(1 << 20)));
        assert!(l.is_up());
        assert_eq!(l.deadline(), None);
        assert!(Liveness::is_keepalive(b"VHCAlive"));
        assert!(!Liveness::is_keepalive(b"VHCAlive!"));
        // Disabled and enabled again: up at once, there is no one to hear.
        l.set_disabled(true);
        assert!(!l.is_up());
        l.set_disabled(false);
        assert!(l.is_up());
        let mut off = Liveness::off();
        off.set_disabled(true);
        off.set_disabled(false);
        assert!(off.is_up());
    }
}
