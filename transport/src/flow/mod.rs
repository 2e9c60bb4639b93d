//! Link-level, credit-based flow control (IBA 7.9; issue 27 item 4): the
//! state both ends of one link keep per data VL, so that a port never sends a
//! packet its partner has no buffer for, and a fabric under load backs up to
//! its senders instead of dropping.
//!
//! Sans-IO, like the engine (ARCHITECTURE.md §3): the caller owns the socket
//! and the clock; every call that needs time takes `now`.
//!
//! - Credits count 64-byte blocks (IBA 7.9.1): a packet of `len` bytes (LRH
//!   through VCRC) takes [`blocks`]`(len)`.
//! - The sender of each VL keeps FCTBS, the total blocks sent since the link
//!   came up, mod 4096, and the last FCCL (credit limit) its partner granted;
//!   it may send a packet of N blocks while `(FCCL - (FCTBS + N)) mod 4096 <=
//!   2048` (IBA 7.9.3, C7-43), and has no credit before the first FCCL: the
//!   credit limits are exchanged before any data (7.9.2, link initialise).
//! - The receiver of each VL keeps ABR, the adjusted blocks received, mod
//!   4096: it adds each data packet's blocks, and an FC packet sets it to the
//!   FCTBS it carries (7.9.3), which writes off the blocks of data packets
//!   lost on the way. It grants `FCCL = ABR + free blocks` (at most 2048), the
//!   free blocks being its buffer less what it still holds: a packet is held
//!   from [`FlowControl::received`] to [`FlowControl::freed`] (an HCA frees it
//!   once the engine took it; a switch when it has left by the egress port).
//! - FC packets ([`FcPacket`], 7.9.4) go to the partner for every operational
//!   VL: at once when the link comes up (Op Init, until the partner is
//!   heard), eagerly when the grant grew by a quarter of the VL's buffer
//!   since the last one or all of it is free again, and periodically, so that one
//!   lost FC packet is recovered by the next (7.9.4: at least every 65,536
//!   symbol times). VL15 is outside flow control (7.9.1): no credit, no
//!   counting.
//!
//! The period: the spec's 65,536 symbol times are 26 us at SDR. A UDP port
//! woken 40,000 times a second would spend a core on it, and the periodic
//! packet only matters when an eager one was lost (the eager packets carry
//! the credit in normal flow), so: [`PERIOD_BUSY`] (1 ms) while the link
//! moved data within [`IDLE_AFTER`], which bounds the stall after a lost FC
//! packet to about a millisecond, and [`PERIOD_IDLE`] (one keepalive beat,
//! 1 s) on an idle link, where nothing waits for credit.

mod packet;

pub use packet::{FcError, FcOp, FcPacket, FC_PACKET_LEN};

use crate::verbs::Time;

/// VL15, the management VL: outside flow control (IBA 7.9.1).
pub const VL15: u8 = 15;

/// Data VLs (0..=14).
pub const DATA_VLS: usize = 15;

/// Bytes of one credit block (IBA 7.9.1).
pub const BLOCK_BYTES: usize = 64;

/// The most credit a receiver grants on one VL: half the 12-bit space, the
/// largest window the mod-4096 comparison of C7-43 can tell from a stale one.
pub const MAX_CREDIT: u16 = 2048;

/// Period of FC packets on a link that moved data lately (see the module).
pub const PERIOD_BUSY: u64 = 1_000_000;

/// Period of FC packets on an idle link.
pub const PERIOD_IDLE: u64 = 1_000_000_000;

/// A link is idle when it moved no data packet for this long.
pub const IDLE_AFTER: u64 = 1_000_000_000;

const MASK: u16 = 0xfff;

/// Credit blocks of a packet of `len` bytes, LRH through VCRC (IBA 7.9.1).
pub fn blocks(len: usize) -> u16 {
    len.div_ceil(BLOCK_BYTES).min(usize::from(MASK)) as u16
}

/// The buffer a port grants its partner, per data VL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowConfig {
    /// Blocks of receive buffer for each data VL; 0: the VL is not
    /// operational on this link (no credit is granted or expected for it).
    pub capacity: [u16; DATA_VLS],
}

impl FlowConfig {
    /// `total` blocks of buffer split evenly over VLs `0..vls` (each capped
    /// at [`MAX_CREDIT`]; at least one VL).
    pub fn split(total: u32, vls: u8) -> FlowConfig {
        let vls = usize::from(vls.clamp(1, DATA_VLS as u8));
        let each = (total / vls as u32).min(u32::from(MAX_CREDIT)) as u16;
        let mut capacity = [0; DATA_VLS];
        capacity[..vls].fill(each);
        FlowConfig { capacity }
    }
}

/// What one link's flow control counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlowCounters {
    /// Per data VL: times a packet had to wait for credit.
    pub stalled: [u64; DATA_VLS],
    /// FC packets sent.
    pub fc_sent: u64,
    /// FC packets received and taken.
    pub fc_received: u64,
    /// FC packets dropped: wrong length.
    pub fc_bad_length: u64,
    /// FC packets dropped: LPCRC mismatch (IBA 7.9.4.2).
    pub fc_bad_lpcrc: u64,
    /// FC packets dropped: reserved Op (IBA 7.9.4.1).
    pub fc_bad_op: u64,
    /// FC packets dropped: about VL15 or a VL not operational here.
    pub fc_bad_vl: u64,
    /// Data packets received beyond the credit granted (a partner that does
    /// not keep to it): taken, since the bytes are here, and counted.
    pub rx_overrun: u64,
    /// Data packets received on a VL not operational here.
    pub rx_bad_vl: u64,
}

impl FlowCounters {
    /// FC packets dropped, every reason.
    pub fn fc_dropped(&self) -> u64 {
        self.fc_bad_length + self.fc_bad_lpcrc + self.fc_bad_op + self.fc_bad_vl
    }

    /// Stalls over all VLs.
    pub fn stalls(&self) -> u64 {
        self.stalled.iter().sum()
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct VlState {
    // Sender.
    fctbs: u16,
    fccl: Option<u16>,
    // Receiver.
    abr: u16,
    held: u32,
    /// The FCCL of the last FC packet for this VL that went out.
    advertised: Option<u16>,
    /// When the last FC packet for this VL went out (`None`: one is due).
    last_fc: Option<u64>,
}

/// Flow control of one link, both directions (see the module).
#[derive(Debug, Clone)]
pub struct FlowControl {
    config: FlowConfig,
    vls: [VlState; DATA_VLS],
    /// Until the partner's first FC packet: ours are Op Init and go at once.
    init: bool,
    /// The last data packet sent or received, or written off.
    last_data: Option<u64>,
    /// The latest time a call brought (`handle_fc` has none).
    clock: u64,
    counters: FlowCounters,
}

impl FlowControl {
    /// A link that just came up: no credit yet, an Init FC packet due on
    /// every operational VL.
    pub fn new(config: FlowConfig) -> FlowControl {
        FlowControl {
            config,
            vls: [VlState::default(); DATA_VLS],
            init: true,
            last_data: None,
            clock: 0,
            counters: FlowCounters::default(),
        }
    }

    pub fn config(&self) -> &FlowConfig {
        &self.config
    }

    pub fn counters(&self) -> &FlowCounters {
        &self.counters
    }

    /// The link (re)initialised (IBA 7.9.2): both directions start over
    /// (FCTBS and ABR 0, no credit) and Init FC packets are due. Blocks the
    /// receiver still holds stay charged until freed.
    pub fn link_up(&mut self) {
        for v in self.vls.iter_mut() {
            *v = VlState {
                held: v.held,
                ..VlState::default()
            };
        }
        self.init = true;
    }

    /// Whether `vl` carries flow-controlled data on this link.
    pub fn is_operational(&self, vl: u8) -> bool {
        self.config
            .capacity
            .get(usize::from(vl))
            .is_some_and(|&c| c > 0)
    }

    /// Credit blocks the sender has on `vl` now (0 before the first FCCL).
    pub fn credit(&self, vl: u8) -> u16 {
        let Some(v) = self.vls.get(usize::from(vl)) else {
            return 0;
        };
        match v.fccl {
            Some(l) => {
                let c = l.wrapping_sub(v.fctbs) & MASK;
                if c <= MAX_CREDIT {
                    c
                } else {
                    0
                }
            }
            None => 0,
        }
    }

    /// Whether a packet of `len` bytes may go out on `vl` now (C7-43). VL15
    /// always may.
    pub fn may_send(&self, vl: u8, len: usize) -> bool {
        if vl == VL15 {
            return true;
        }
        let Some(v) = self.vls.get(usize::from(vl)) else {
            return false;
        };
        let n = blocks(len);
        v.fccl
            .is_some_and(|l| l.wrapping_sub(v.fctbs.wrapping_add(n)) & MASK <= MAX_CREDIT)
    }

    /// A packet of `len` bytes went out on `vl` (after [`Self::may_send`]):
    /// FCTBS advances.
    pub fn sent(&mut self, vl: u8, len: usize, now: Time) {
        if let Some(v) = self.vls.get_mut(usize::from(vl)) {
            v.fctbs = v.fctbs.wrapping_add(blocks(len)) & MASK;
            self.last_data = Some(now.0);
            self.clock = self.clock.max(now.0);
        }
    }

    /// A packet on `vl` had to wait for credit.
    pub fn record_stall(&mut self, vl: u8) {
        if let Some(s) = self.counters.stalled.get_mut(usize::from(vl)) {
            *s += 1;
        }
    }

    /// A data packet of `len` bytes arrived on `vl`: ABR advances and the
    /// blocks are held until [`Self::freed`]. False when it was beyond the
    /// credit granted or on a VL not operational here (counted).
    pub fn received(&mut self, vl: u8, len: usize, now: Time) -> bool {
        if vl == VL15 {
            return true;
        }
        if !self.is_operational(vl) {
            self.counters.rx_bad_vl += 1;
            return false;
        }
        let cap = u32::from(self.config.capacity[usize::from(vl)]);
        let v = &mut self.vls[usize::from(vl)];
        let n = blocks(len);
        v.abr = v.abr.wrapping_add(n) & MASK;
        v.held += u32::from(n);
        self.last_data = Some(now.0);
        self.clock = self.clock.max(now.0);
        if v.held > cap {
            self.counters.rx_overrun += 1;
            return false;
        }
        true
    }

    /// A packet of `len` bytes received on `vl` left the buffer: its blocks
    /// are free to grant again.
    pub fn freed(&mut self, vl: u8, len: usize) {
        if vl == VL15 || !self.is_operational(vl) {
            return;
        }
        let v = &mut self.vls[usize::from(vl)];
        v.held -= u32::from(blocks(len)).min(v.held);
    }

    /// Blocks received on `vl` and not freed yet.
    pub fn held(&self, vl: u8) -> u32 {
        self.vls.get(usize::from(vl)).map_or(0, |v| v.held)
    }

    /// The FCCL the receiver grants on `vl` now: ABR + free blocks.
    pub fn fccl(&self, vl: u8) -> u16 {
        let Some(v) = self.vls.get(usize::from(vl)) else {
            return 0;
        };
        let cap = u32::from(self.config.capacity[usize::from(vl)]);
        let free = cap.saturating_sub(v.held).min(u32::from(MAX_CREDIT)) as u16;
        v.abr.wrapping_add(free) & MASK
    }

    /// A link packet from the partner: an FC packet sets the sender's FCCL
    /// and the receiver's ABR (7.9.3). Dropped and counted when it does not
    /// decode or names a VL not operational here.
    pub fn handle_fc(&mut self, bytes: &[u8]) -> Result<FcPacket, FcError> {
        let p = match FcPacket::decode(bytes) {
            Ok(p) if self.is_operational(p.vl) => p,
            Ok(_) => {
                self.counters.fc_bad_vl += 1;
                return Err(FcError::Vl15);
            }
            Err(e) => {
                let c = &mut self.counters;
                match e {
                    FcError::Length => c.fc_bad_length += 1,
                    FcError::Lpcrc => c.fc_bad_lpcrc += 1,
                    FcError::Op => c.fc_bad_op += 1,
                    FcError::Vl15 => c.fc_bad_vl += 1,
                }
                return Err(e);
            }
        };
        self.counters.fc_received += 1;
        let v = &mut self.vls[usize::from(p.vl)];
        v.fccl = Some(p.fccl);
        if v.abr != p.fctbs && p.op == FcOp::Normal {
            // The partner sent data that never arrived (7.9.3: ABR takes
            // its FCTBS, writing the lost blocks off). It is busy, maybe
            // waiting for the credit this frees: our periodic FC packets
            // go at the busy period, so a lost one costs it a period, not
            // an idle one.
            self.last_data = Some(self.clock);
        }
        v.abr = p.fctbs;
        if p.op == FcOp::Init {
            // The partner (re)initialises: it needs our credit limits
            // before it can send anything, so they go at once.
            for v in self.vls.iter_mut() {
                v.last_fc = None;
            }
        }
        self.init = false;
        Ok(p)
    }

    /// When the periodic FC packet after one sent at `last` is due: a busy
    /// period after it while the link is busy then, else an idle one.
    fn next_periodic(&self, last: u64) -> u64 {
        let busy = last.saturating_add(PERIOD_BUSY);
        match self.last_data {
            _ if self.init => busy,
            Some(t) if busy < t.saturating_add(IDLE_AFTER) => busy,
            _ => last.saturating_add(PERIOD_IDLE),
        }
    }

    /// When `vl`'s next periodic FC packet is due (0: now).
    fn next_fc(&self, vl: usize) -> u64 {
        self.vls[vl].last_fc.map_or(0, |l| self.next_periodic(l))
    }

    /// Whether `vl`'s grant grew enough since its last FC packet to say so
    /// now: by a quarter of its buffer, or to all of it free again. It grows
    /// as blocks are freed, and when an FC packet writes off lost blocks.
    fn eager(&self, vl: usize) -> bool {
        let v = &self.vls[vl];
        let cap = self.config.capacity[vl];
        let Some(last) = v.advertised else {
            return true;
        };
        let gain = self.fccl(vl as u8).wrapping_sub(last) & MASK;
        gain > 0 && gain <= MAX_CREDIT && (gain >= (cap / 4).max(1) || v.held == 0)
    }

    fn due(&self, vl: usize, now: u64) -> bool {
        self.config.capacity[vl] > 0 && (now >= self.next_fc(vl) || self.eager(vl))
    }

    /// The next FC packet to send as of `now`, if one is due: Init ones
    /// while the link initialises, then eager and periodic ones.
    pub fn poll_transmit(&mut self, now: Time) -> Option<FcPacket> {
        self.clock = self.clock.max(now.0);
        let vl = (0..DATA_VLS).find(|&vl| {
            // While initialising, one Init packet per VL per busy period.
            if self.init {
                self.config.capacity[vl] > 0 && now.0 >= self.next_fc(vl)
            } else {
                self.due(vl, now.0)
            }
        })?;
        let p = FcPacket {
            op: if self.init { FcOp::Init } else { FcOp::Normal },
            fctbs: self.vls[vl].fctbs,
            vl: vl as u8,
            fccl: self.fccl(vl as u8),
        };
        let v = &mut self.vls[vl];
        v.advertised = Some(p.fccl);
        v.last_fc = Some(now.0);
        self.counters.fc_sent += 1;
        Some(p)
    }

    /// When [`Self::poll_transmit`] next has a packet: at once for an eager
    /// one, else the earliest periodic one.
    pub fn poll_timeout(&self) -> Option<Time> {
        (0..DATA_VLS)
            .filter(|&vl| self.config.capacity[vl] > 0)
            .map(|vl| {
                if !self.init && self.eager(vl) {
                    0
                } else {
                    self.next_fc(vl)
                }
            })
            .min()
            .map(Time)
    }
}
