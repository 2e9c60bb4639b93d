//! The virtio-net frame paths over one split virtqueue each (virtio 1.2 §5.1.6):
//! guest TX chains into frames for the TAP, frames for the guest into its RX
//! buffers. Plain functions over a `virtio_queue::Queue` and any `GuestMemory`, so
//! that tests drive them with a mock ring and the backend with the real one.
//!
//! The guest writes the rings: every descriptor is checked (direction, length,
//! address) before use, every bad chain is returned to the guest with nothing in
//! it and counted, and every loop is bounded by a budget, never by the guest.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

use virtio_queue::desc::split::Descriptor;
use virtio_queue::{DescriptorChain, Queue, QueueT};
use vm_memory::{Bytes, GuestMemory, Permissions};

use crate::fabric::{vnet_hdr_ok, MAX_FRAME_LEN, VNET_HDR_LEN};
use transport::wire::roce::ETH_HEADER_LEN;

/// Descriptors one chain may have. Linux sends a frame in at most MAX_SKB_FRAGS
/// (17, up to 45 when configured) + 2 descriptors; a longer chain is garbage.
pub const MAX_CHAIN_DESCS: usize = 64;

/// RX chains one frame may be spread over with MRG_RXBUF (virtio 1.2 §5.1.6.3.2):
/// a 64 KiB GSO frame in Linux's smallest mergeable buffers (~1.5 KiB) needs ~45.
pub const MAX_RX_BUFFERS: usize = 64;

/// Chains (TX) or frames (RX) handled per call, so that one queue cannot hold the
/// backend's thread; the caller comes back while work remains.
pub const BUDGET: usize = 256;

/// Offset of `num_buffers` in `virtio_net_hdr_v1`.
const NUM_BUFFERS_AT: usize = 10;
/// `flags` of `virtio_net_hdr_v1`: the checksum is already verified.
const HDR_F_DATA_VALID: u8 = 2;

/// What the backend did, and every reason it dropped a frame or a chain. Shared
/// with the counter report, hence atomics.
#[derive(Debug, Default)]
pub struct NetCounters {
    /// Guest frames written to the TAP.
    pub tx_frames: AtomicU64,
    pub tx_bytes: AtomicU64,
    /// Frames written into the guest's RX ring.
    pub rx_frames: AtomicU64,
    pub rx_bytes: AtomicU64,
    /// TX: chains with a device-writable descriptor, a zero-length descriptor, more
    /// than [`MAX_CHAIN_DESCS`] descriptors, a broken `next` link or an address
    /// outside guest memory.
    pub drop_tx_bad_desc: AtomicU64,
    /// TX: shorter than a vnet header and an Ethernet header.
    pub drop_tx_short: AtomicU64,
    /// TX: longer than a vnet header and [`MAX_FRAME_LEN`].
    pub drop_tx_oversized: AtomicU64,
    /// TX: a vnet header with unknown flags or GSO type.
    pub drop_tx_bad_hdr: AtomicU64,
    /// TX: the TAP refused the frame.
    pub drop_tx_tap_error: AtomicU64,
    /// RX: chains with a device-readable or zero-length descriptor, too many
    /// descriptors, a broken link or an address outside guest memory (returned
    /// empty to the guest).
    pub drop_rx_bad_desc: AtomicU64,
    /// RX: a frame larger than a whole chain without MRG_RXBUF, or than
    /// [`MAX_RX_BUFFERS`] buffers with it.
    pub drop_rx_too_big: AtomicU64,
    /// RX: writing into guest memory failed after the chain was checked.
    pub drop_rx_write_error: AtomicU64,
    /// RX: frames dropped because the guest's RX ring went away (driver stopped,
    /// disconnect) while they waited.
    pub drop_rx_detached: AtomicU64,
    /// Memory tables refused (a region not file-backed, not sealable, or
    /// longer than its file; issue 25 item 2): each cost its connection.
    pub mem_refused: AtomicU64,
    /// Panics contained in the backend's worker (a bug): each cost its
    /// connection, never the process.
    pub worker_panics: AtomicU64,
}

fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

fn get(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

impl NetCounters {
    /// All frames and chains dropped, for every reason.
    pub fn dropped(&self) -> u64 {
        [
            &self.drop_tx_bad_desc,
            &self.drop_tx_short,
            &self.drop_tx_oversized,
            &self.drop_tx_bad_hdr,
            &self.drop_tx_tap_error,
            &self.drop_rx_bad_desc,
            &self.drop_rx_too_big,
            &self.drop_rx_write_error,
            &self.drop_rx_detached,
        ]
        .into_iter()
        .map(get)
        .sum()
    }
}

impl std::fmt::Display for NetCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "tx {} ({} B) rx {} ({} B) dropped {}: tx_bad_desc {} tx_short {} \
             tx_oversized {} tx_bad_hdr {} tx_tap_error {} rx_bad_desc {} rx_too_big {} \
             rx_write_error {} rx_detached {} mem_refused {} worker_panics {}",
            get(&self.tx_frames),
            get(&self.tx_bytes),
            get(&self.rx_frames),
            get(&self.rx_bytes),
            self.dropped(),
            get(&self.drop_tx_bad_desc),
            get(&self.drop_tx_short),
            get(&self.drop_tx_oversized),
            get(&self.drop_tx_bad_hdr),
            get(&self.drop_tx_tap_error),
            get(&self.drop_rx_bad_desc),
            get(&self.drop_rx_too_big),
            get(&self.drop_rx_write_error),
            get(&self.drop_rx_detached),
            get(&self.mem_refused),
            get(&self.worker_panics),
        )
    }
}

/// The descriptors of one chain, checked for direction, length and address, or
/// `None` for a bad chain. `writable`: an RX chain (every descriptor
/// device-writable, virtio 1.2 §5.1.6.3.1), else a TX chain (every descriptor
/// device-readable, §5.1.6.2).
fn checked_descs<M: GuestMemory>(
    chain: DescriptorChain<&M>,
    mem: &M,
    writable: bool,
    out: &mut Vec<Descriptor>,
) -> Option<()> {
    out.clear();
    let access = if writable {
        Permissions::Write
    } else {
        Permissions::Read
    };
    let mut more = false;
    for d in chain {
        if out.len() == MAX_CHAIN_DESCS
            || d.is_write_only() != writable
            || d.len() == 0
            || !mem.check_range(d.addr(), d.len() as usize, access)
        {
            return None;
        }
        more = d.has_next();
        out.push(d);
    }
    // The iterator stops silently at a `next` outside the table or after a
    // loop's queue-size descriptors: a chain whose last descriptor still says
    // NEXT is broken.
    (!more && !out.is_empty()).then_some(())
}

/// Moves up to [`BUDGET`] guest TX frames to `out` (the TAP), each with its vnet
/// header, returning every chain to the used ring. `buf` holds one frame
/// ([`VNET_HDR_LEN`] + [`MAX_FRAME_LEN`] bytes). Returns the chains consumed.
pub fn process_tx<M, W>(
    queue: &mut Queue,
    mem: &M,
    buf: &mut [u8],
    counters: &NetCounters,
    mut out: W,
) -> usize
where
    M: GuestMemory,
    W: FnMut(&[u8]) -> io::Result<usize>,
{
    let mut descs = Vec::with_capacity(MAX_CHAIN_DESCS);
    let mut done = 0;
    while done < BUDGET {
        let Some(chain) = queue.pop_descriptor_chain(mem) else {
            break;
        };
        done += 1;
        let head = chain.head_index();
        match read_tx_frame(chain, mem, buf, &mut descs, counters) {
            Some(len) => match out(&buf[..len]) {
                Ok(_) => {
                    add(&counters.tx_frames, 1);
                    add(&counters.tx_bytes, (len - VNET_HDR_LEN) as u64);
                }
                Err(e) => {
                    if get(&counters.drop_tx_tap_error) == 0 {
                        log::warn!("net: writing a guest frame to the TAP failed: {e}");
                    }
                    add(&counters.drop_tx_tap_error, 1);
                }
            },
            None => log::debug!("net: dropped guest TX chain {head}"),
        }
        // Used length 0: the device wrote nothing into a TX chain (§2.7.8).
        if let Err(e) = queue.add_used(mem, head, 0) {
            log::debug!("net: TX used ring: {e}");
            break;
        }
    }
    done
}

/// Copies one TX chain into `buf`; its length if it holds a sound frame.
fn read_tx_frame<M: GuestMemory>(
    chain: DescriptorChain<&M>,
    mem: &M,
    buf: &mut [u8],
    descs: &mut Vec<Descriptor>,
    counters: &NetCounters,
) -> Option<usize> {
    if checked_descs(chain, mem, false, descs).is_none() {
        add(&counters.drop_tx_bad_desc, 1);
        return None;
    }
    let limit = buf.len().min(VNET_HDR_LEN + MAX_FRAME_LEN);
    let mut len = 0usize;
    for d in descs.iter() {
        let n = d.len() as usize;
        if len + n > limit {
            add(&counters.drop_tx_oversized, 1);
            return None;
        }
        if mem.read_slice(&mut buf[len..len + n], d.addr()).is_err() {
            add(&counters.drop_tx_bad_desc, 1);
            return None;
        }
        len += n;
    }
    if len < VNET_HDR_LEN + ETH_HEADER_LEN {
        add(&counters.drop_tx_short, 1);
        return None;
    }
    let hdr: &[u8; VNET_HDR_LEN] = buf[..VNET_HDR_LEN].try_into().expect("12 bytes");
    if !vnet_hdr_ok(hdr, len - VNET_HDR_LEN) {
        add(&counters.drop_tx_bad_hdr, 1);
        return None;
    }
    Some(len)
}

/// How the guest's driver posts RX buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxMode {
    /// VIRTIO_NET_F_MRG_RXBUF negotiated: a frame may span several chains.
    pub mergeable: bool,
    /// VIRTIO_NET_F_GUEST_CSUM negotiated: DATA_VALID may be passed on.
    pub guest_csum: bool,
}

/// What became of one frame offered to the RX ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxOutcome {
    /// Written; the guest must be notified.
    Delivered,
    /// Not enough buffers posted: keep the frame, try again on the next RX kick.
    NoBuffers,
    /// Dropped (counted).
    Dropped,
}

/// One checked RX chain: its head and its writable descriptors.
struct RxChain {
    head: u16,
    descs: Vec<Descriptor>,
    capacity: usize,
}

/// Writes one frame (starting with its vnet header, as read from the TAP) into the
/// guest's RX buffers, setting `num_buffers` (virtio 1.2 §5.1.6.4).
pub fn deliver_rx<M: GuestMemory>(
    queue: &mut Queue,
    mem: &M,
    frame: &mut [u8],
    mode: RxMode,
    counters: &NetCounters,
) -> RxOutcome {
    if frame.len() < VNET_HDR_LEN {
        add(&counters.drop_rx_too_big, 1);
        return RxOutcome::Dropped;
    }
    let mut chains: Vec<RxChain> = Vec::new();
    let mut bad: Vec<u16> = Vec::new();
    let mut capacity = 0usize;
    let max_chains = if mode.mergeable { MAX_RX_BUFFERS } else { 1 };
    while capacity < frame.len() && chains.len() < max_chains {
        let Some(chain) = queue.pop_descriptor_chain(mem) else {
            break;
        };
        let head = chain.head_index();
        let mut descs = Vec::new();
        if checked_descs(chain, mem, true, &mut descs).is_none() {
            add(&counters.drop_rx_bad_desc, 1);
            bad.push(head);
            continue;
        }
        let cap = descs.iter().map(|d| d.len() as usize).sum::<usize>();
        capacity += cap;
        chains.push(RxChain {
            head,
            descs,
            capacity: cap,
        });
    }
    // Bad chains go back empty: a driver posting them is broken, and holding them
    // would stall the ring. Linux counts a too-short used buffer as a length
    // error and reposts it.
    for &head in &bad {
        let _ = queue.add_used(mem, head, 0);
    }
    if capacity < frame.len() {
        if chains.is_empty() {
            // Nothing usable posted (any garbage went back above): wait.
            return RxOutcome::NoBuffers;
        }
        let out_of_buffers = chains.len() < max_chains && bad.is_empty();
        if out_of_buffers {
            // Put the good chains back for the next attempt: nothing was added
            // to the used ring for them, so rewinding next_avail is exact.
            let back = u16::try_from(chains.len()).unwrap_or(u16::MAX);
            queue.set_next_avail(queue.next_avail().wrapping_sub(back));
            return RxOutcome::NoBuffers;
        }
        if !mode.mergeable && bad.is_empty() {
            // One chain too small for this frame; the next frame may fit it.
            let back = u16::try_from(chains.len()).unwrap_or(u16::MAX);
            queue.set_next_avail(queue.next_avail().wrapping_sub(back));
        } else {
            for c in &chains {
                let _ = queue.add_used(mem, c.head, 0);
            }
        }
        add(&counters.drop_rx_too_big, 1);
        return RxOutcome::Dropped;
    }
    let n = u16::try_from(chains.len()).unwrap_or(u16::MAX);
    frame[NUM_BUFFERS_AT..NUM_BUFFERS_AT + 2].copy_from_slice(&n.to_le_bytes());
    if !mode.guest_csum {
        // §5.1.6.4.1: DATA_VALID only when GUEST_CSUM was negotiated.
        frame[0] &= !HDR_F_DATA_VALID;
    }
    let mut at = 0usize;
    let mut failed = false;
    let mut used = Vec::with_capacity(chains.len());
    for c in &chains {
        let start = at;
        for d in &c.descs {
            if at == frame.len() {
                break;
            }
            let n = (d.len() as usize).min(frame.len() - at);
            failed |= mem.write_slice(&frame[at..at + n], d.addr()).is_err();
            at += n;
        }
        debug_assert!(at - start <= c.capacity);
        used.push((c.head, (at - start) as u32));
    }
    for (head, len) in used {
        let _ = queue.add_used(mem, head, if failed { 0 } else { len });
    }
    if failed {
        add(&counters.drop_rx_write_error, 1);
        return RxOutcome::Dropped;
    }
    add(&counters.rx_frames, 1);
    add(&counters.rx_bytes, (frame.len() - VNET_HDR_LEN) as u64);
    RxOutcome::Delivered
}
