//! The `VhostUserBackend` of the RoCE port's NIC: features, config space and the
//! event handler; `vhost-user-backend` runs the protocol and the vrings, and
//! [`super::frames`] moves the frames.
//!
//! Events on the crate's one worker thread: a kick on RX (queue 0: the guest
//! posted buffers), a kick on TX (queue 1: the guest sent frames), and
//! [`TO_GUEST_EVENT`], the [`ToGuest`](crate::fabric::ToGuest) queue's eventfd
//! (the data path read frames for the guest from the TAP).

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use vhost::vhost_user::message::VhostUserProtocolFeatures;
use vhost_user_backend::{ShutdownHandle, VhostUserBackend, VringRwLock, VringT};
use virtio_bindings::virtio_config::VIRTIO_F_VERSION_1;
use virtio_bindings::virtio_net::{
    VIRTIO_NET_F_CSUM, VIRTIO_NET_F_GUEST_CSUM, VIRTIO_NET_F_GUEST_TSO4, VIRTIO_NET_F_GUEST_TSO6,
    VIRTIO_NET_F_HOST_TSO4, VIRTIO_NET_F_HOST_TSO6, VIRTIO_NET_F_MAC, VIRTIO_NET_F_MRG_RXBUF,
    VIRTIO_NET_F_MTU, VIRTIO_NET_F_STATUS, VIRTIO_NET_S_LINK_UP,
};
use virtio_bindings::virtio_ring::VIRTIO_RING_F_EVENT_IDX;
use vm_memory::{
    GuestAddressSpace, GuestMemoryAtomic, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion,
};
use vmm_sys_util::epoll::EventSet;
use vmm_sys_util::event::{
    new_event_consumer_and_notifier, EventConsumer, EventFlag, EventNotifier,
};

use super::frames::{self, NetCounters, RxMode, RxOutcome};
use crate::fabric::{Tap, MAX_FRAME_LEN, TUN_F_CSUM, TUN_F_TSO4, TUN_F_TSO6, VNET_HDR_LEN};

/// Queue indexes (virtio 1.2 §5.1.2: receiveq1, transmitq1).
pub const RX_QUEUE: u16 = 0;
pub const TX_QUEUE: u16 = 1;
const NUM_QUEUES: usize = 2;

/// The largest ring the guest may set up (Linux and QEMU default to 256).
pub const QUEUE_SIZE: usize = 1024;

/// Event id of the to-guest eventfd: above the queue ids and the crate's own exit
/// event (`num_queues`).
pub const TO_GUEST_EVENT: u16 = NUM_QUEUES as u16 + 1;

/// VHOST_USER_F_PROTOCOL_FEATURES (vhost-user spec, bit 30) is NOT offered: QEMU
/// (11.1, virtio-net's peer_attach) sends SET_VRING_ENABLE as soon as it is
/// offered, before SET_FEATURES acks it, and the `vhost` crate (0.18) refuses that
/// request as an inactive feature and drops the connection. Without it the rings
/// start at SET_FEATURES (vhost-user spec, "Ring states"), which is all one queue
/// pair needs.
pub const VHOST_USER_F_PROTOCOL_FEATURES: u32 = 30;

/// The features offered: virtio 1 with one queue pair, the port's MAC and MTU,
/// link status, mergeable RX buffers and the checksum/TSO offloads that the TAP's
/// vnet header carries both ways unchanged (as cloud-hypervisor's vhost-user-net
/// does), EVENT_IDX for fewer kicks and interrupts.
pub const FEATURES: u64 = 1 << VIRTIO_F_VERSION_1
    | 1 << VIRTIO_NET_F_MAC
    | 1 << VIRTIO_NET_F_MTU
    | 1 << VIRTIO_NET_F_STATUS
    | 1 << VIRTIO_NET_F_MRG_RXBUF
    | 1 << VIRTIO_NET_F_CSUM
    | 1 << VIRTIO_NET_F_GUEST_CSUM
    | 1 << VIRTIO_NET_F_HOST_TSO4
    | 1 << VIRTIO_NET_F_HOST_TSO6
    | 1 << VIRTIO_NET_F_GUEST_TSO4
    | 1 << VIRTIO_NET_F_GUEST_TSO6
    | 1 << VIRTIO_RING_F_EVENT_IDX;

/// The TUNSETOFFLOAD flags matching what the guest accepts on RX (virtio 1.2
/// §5.1.6.4: a partial checksum needs GUEST_CSUM, a TSO frame GUEST_TSO4/6).
pub fn tap_offload(acked: u64) -> u32 {
    let has = |bit: u32| acked & (1 << bit) != 0;
    let mut flags = 0;
    if has(VIRTIO_NET_F_GUEST_CSUM) {
        flags |= TUN_F_CSUM;
        if has(VIRTIO_NET_F_GUEST_TSO4) {
            flags |= TUN_F_TSO4;
        }
        if has(VIRTIO_NET_F_GUEST_TSO6) {
            flags |= TUN_F_TSO6;
        }
    }
    flags
}

/// The device config space (virtio 1.2 §5.1.4): mac, status, max_virtqueue_pairs,
/// mtu; little-endian.
pub fn config_space(mac: [u8; 6], mtu: u16) -> [u8; 12] {
    let mut c = [0u8; 12];
    c[..6].copy_from_slice(&mac);
    c[6..8].copy_from_slice(&(VIRTIO_NET_S_LINK_UP as u16).to_le_bytes());
    c[8..10].copy_from_slice(&1u16.to_le_bytes());
    c[10..12].copy_from_slice(&mtu.to_le_bytes());
    c
}

type Mem = GuestMemoryAtomic<GuestMemoryMmap>;

/// Per-connection state, under one lock (the worker thread is the only user but
/// for the handler's calls on the protocol thread).
struct State {
    /// The guest memory the frames use: a map whose every region passed
    /// [`checked_memory`], held whole (not the crate's shared handle, which
    /// holds a new table before it is checked).
    mem: Option<Arc<GuestMemoryMmap>>,
    acked: u64,
    event_idx: bool,
    /// A frame taken from the to-guest queue that did not fit the posted buffers
    /// yet (at most one: the queue keeps the rest).
    pending: Option<Vec<u8>>,
    tx_buf: Box<[u8]>,
}

/// One connection's backend. A new one serves each QEMU connection, so nothing
/// of a previous guest (memory, features, a half-delivered frame) carries over.
pub struct NetBackend {
    tap: Arc<Tap>,
    counters: Arc<NetCounters>,
    state: Mutex<State>,
    exit: Mutex<Option<EventNotifier>>,
    /// Ends the connection (after a panic in the worker, [`Self::handle_event`]).
    shutdown: Mutex<Option<ShutdownHandle>>,
    /// A panic in the worker: nothing more is done for this connection.
    failed: AtomicBool,
}

impl NetBackend {
    pub fn new(tap: Arc<Tap>, counters: Arc<NetCounters>) -> NetBackend {
        NetBackend {
            tap,
            counters,
            state: Mutex::new(State {
                mem: None,
                acked: 0,
                event_idx: false,
                pending: None,
                tx_buf: vec![0; VNET_HDR_LEN + MAX_FRAME_LEN].into_boxed_slice(),
            }),
            exit: Mutex::new(None),
            shutdown: Mutex::new(None),
            failed: AtomicBool::new(false),
        }
    }

    /// How to end the connection being served (`super::serve_one`).
    pub fn set_shutdown(&self, h: Option<ShutdownHandle>) {
        *self.shutdown.lock().unwrap_or_else(|p| p.into_inner()) = h;
    }

    /// Whether a panic in the worker ended this connection.
    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The guest's RX ring is gone: drop what waits for it, stop queueing, and
    /// take the offloads back (no reader accepts them now).
    pub fn detach(&self) {
        let dropped = self.tap.to_guest().set_attached(false)
            + usize::from(self.state().pending.take().is_some());
        self.counters
            .drop_rx_detached
            .fetch_add(dropped as u64, std::sync::atomic::Ordering::Relaxed);
        if let Err(e) = self.tap.set_offload(0) {
            log::debug!("net: TUNSETOFFLOAD 0: {e}");
        }
    }

    /// Asks the worker thread to end (after a disconnect).
    pub fn stop_worker(&self) {
        if let Some(n) = self.exit.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            let _ = n.notify();
        }
    }

    fn process_tx(&self, vring: &VringRwLock<Mem>) {
        let mut st = self.state();
        let Some(mem) = st.mem.clone() else { return };
        if !ring_ready(vring) {
            return;
        }
        let event_idx = st.event_idx;
        let tap = &self.tap;
        // A pass that popped nothing although the last re-enable said more was
        // there (see the end of the loop).
        let mut empty_after_more = false;
        loop {
            let mut v = vring.get_mut();
            let q = v.get_queue_mut();
            if event_idx {
                let _ = virtio_queue::QueueT::disable_notification(q, &*mem);
            }
            let n = frames::process_tx(q, &*mem, &mut st.tx_buf, &self.counters, |f| {
                tap.write_frame(f)
            });
            drop(v);
            if n > 0 {
                signal(vring, &mem);
            }
            if n >= frames::BUDGET {
                continue;
            }
            // Re-enable kicks; frames posted meanwhile are picked up here
            // (virtio 1.2 §2.7.10, the EVENT_IDX race). On the checked map,
            // not the vring's own handle (`State::mem`).
            if !event_idx
                || !virtio_queue::QueueT::enable_notification(
                    vring.get_mut().get_queue_mut(),
                    &*mem,
                )
                .unwrap_or(false)
            {
                break;
            }
            // "More" again after a pass that popped nothing: the ring claims
            // buffers it cannot give (an avail index further ahead than the
            // queue size, §2.7.6, which pop refuses). Stop with kicks on
            // instead of spinning; the next kick tries again (issue 25,
            // found by the net_backend fuzz target).
            if n == 0 && empty_after_more {
                break;
            }
            empty_after_more = n == 0;
        }
    }

    fn process_rx(&self, vring: &VringRwLock<Mem>) {
        let mut st = self.state();
        let Some(mem) = st.mem.clone() else { return };
        if !ring_ready(vring) {
            return;
        }
        let mode = RxMode {
            mergeable: st.acked & (1 << VIRTIO_NET_F_MRG_RXBUF) != 0,
            guest_csum: st.acked & (1 << VIRTIO_NET_F_GUEST_CSUM) != 0,
        };
        let to_guest = self.tap.to_guest();
        let mut delivered = 0;
        for _ in 0..frames::BUDGET {
            let Some(mut frame) = st.pending.take().or_else(|| to_guest.pop()) else {
                break;
            };
            let mut v = vring.get_mut();
            let outcome =
                frames::deliver_rx(v.get_queue_mut(), &*mem, &mut frame, mode, &self.counters);
            drop(v);
            match outcome {
                RxOutcome::Delivered => delivered += 1,
                RxOutcome::Dropped => {}
                RxOutcome::NoBuffers => {
                    st.pending = Some(frame);
                    break;
                }
            }
        }
        if delivered > 0 {
            signal(vring, &mem);
        }
        if st.pending.is_none() && !to_guest.is_empty() {
            // Budget spent with frames left: come back through the event.
            to_guest.notify();
        }
    }
}

/// Whether the ring is set up (addresses, size) and enabled.
fn ring_ready(vring: &VringRwLock<Mem>) -> bool {
    let v = vring.get_ref();
    v.is_enabled() && virtio_queue::QueueT::ready(v.get_queue())
}

/// Interrupts the guest if the ring asks for it (EVENT_IDX: used_event, read
/// in `mem`, the checked map).
fn signal(vring: &VringRwLock<Mem>, mem: &GuestMemoryMmap) {
    let needs = virtio_queue::QueueT::needs_notification(vring.get_mut().get_queue_mut(), mem);
    if needs.unwrap_or(true) {
        if let Err(e) = vring.signal_used_queue() {
            log::debug!("net: signal used queue: {e}");
        }
    }
}

impl VhostUserBackend for NetBackend {
    type Bitmap = ();
    type Vring = VringRwLock<Mem>;

    fn num_queues(&self) -> usize {
        NUM_QUEUES
    }

    fn max_queue_size(&self) -> usize {
        QUEUE_SIZE
    }

    fn features(&self) -> u64 {
        FEATURES
    }

    fn acked_features(&self, features: u64) {
        self.state().acked = features;
        let flags = tap_offload(features);
        match self.tap.set_offload(flags) {
            // The TAP's may add USO (Tap::set_offload): the link cuts those.
            Ok(set) => log::info!("net: guest features {features:#x}, TAP offloads {set:#x}"),
            Err(e) => log::warn!("net: TUNSETOFFLOAD {flags:#x} on {}: {e}", self.tap.name()),
        }
    }

    fn protocol_features(&self) -> VhostUserProtocolFeatures {
        VhostUserProtocolFeatures::REPLY_ACK
    }

    fn reset_device(&self) {
        self.detach();
    }

    fn set_event_idx(&self, enabled: bool) {
        self.state().event_idx = enabled;
    }

    fn get_config(&self, offset: u32, size: u32) -> Vec<u8> {
        let c = config_space(self.tap.mac(), self.tap.mtu());
        let mut out = vec![0u8; (size as usize).min(256)];
        for (i, b) in out.iter_mut().enumerate() {
            if let Some(v) = c.get(offset as usize + i) {
                *b = *v;
            }
        }
        out
    }

    fn update_memory(&self, mem: Mem) -> io::Result<()> {
        let map = mem.memory().into_inner();
        if let Err(e) = checked_memory(&map) {
            // The frames keep no memory of this client: none of its table is
            // used, and the error ends the connection (the vhost crate drops
            // a client whose request fails).
            self.state().mem = None;
            self.detach();
            self.counters
                .mem_refused
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            log::warn!("net: vhost-user memory table refused: {e}; connection dropped");
            return Err(io::Error::other(e));
        }
        self.state().mem = Some(map);
        // The guest's driver started the device (QEMU sends the memory table at
        // vhost start): frames may queue for it from now on.
        self.tap.to_guest().set_attached(true);
        Ok(())
    }

    fn stop_vring(&self, queue_index: u32) -> io::Result<()> {
        if queue_index == u32::from(RX_QUEUE) {
            // GET_VRING_BASE: the driver stopped; a restarted one starts clean.
            self.detach();
        }
        Ok(())
    }

    fn exit_event(&self, _thread_index: usize) -> Option<(EventConsumer, EventNotifier)> {
        let (consumer, notifier) =
            new_event_consumer_and_notifier(EventFlag::NONBLOCK | EventFlag::CLOEXEC).ok()?;
        let mine = notifier.try_clone().ok()?;
        *self.exit.lock().unwrap_or_else(|p| p.into_inner()) = Some(mine);
        Some((consumer, notifier))
    }

    fn handle_event(
        &self,
        device_event: u16,
        _evset: EventSet,
        vrings: &[VringRwLock<Mem>],
        _thread_id: usize,
    ) -> io::Result<()> {
        // Never an error for anything the guest did: an error ends the worker.
        // A panic (a bug) is contained as on the device's other threads: it
        // costs this connection, reported and counted, never the process,
        // whose HCA keeps serving (issue 25 item 2; `run::supervise_data_path`).
        if self.failed() {
            return Ok(());
        }
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.handle(device_event, vrings)
        }));
        if let Err(e) = r {
            self.failed.store(true, Ordering::Release);
            self.counters
                .worker_panics
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            log::error!(
                "net: internal error in the vhost-user-net worker ({}): connection dropped",
                crate::panic_text::panic_text(&*e)
            );
            self.state().mem = None;
            self.detach();
            if let Some(h) = self
                .shutdown
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
            {
                h.shutdown();
            }
        }
        Ok(())
    }
}

/// Whether every region of `map` is safe to touch for as long as the map
/// lives: file-backed, sealed against shrinking and as long as it says, the
/// rules of the vfio-user path (`pci::seal_and_check_size`). A client that
/// declares 16 MiB backed by a 1 MiB memfd, or truncates it later, would
/// otherwise kill the process with SIGBUS on the first descriptor there
/// (issue 25 item 2).
fn checked_memory(map: &GuestMemoryMmap) -> Result<(), String> {
    for r in map.iter() {
        let at = r.start_addr().0;
        let Some(f) = r.file_offset() else {
            return Err(format!("region at {at:#x}: not backed by a file"));
        };
        pci::seal_and_check_size(f.file(), f.start(), r.len())
            .map_err(|e| format!("region at {at:#x} (+{:#x}): {e}", r.len()))?;
    }
    Ok(())
}

impl NetBackend {
    /// [`VhostUserBackend::handle_event`]'s work.
    fn handle(&self, device_event: u16, vrings: &[VringRwLock<Mem>]) {
        test_panic(device_event);
        let (Some(rx), Some(tx)) = (
            vrings.get(usize::from(RX_QUEUE)),
            vrings.get(usize::from(TX_QUEUE)),
        ) else {
            return;
        };
        match device_event {
            RX_QUEUE => self.process_rx(rx),
            TX_QUEUE => self.process_tx(tx),
            TO_GUEST_EVENT => {
                let _ = self.tap.to_guest().event().read();
                // Frames that come before the ring is enabled wait (bounded) for it.
                if rx.get_ref().is_enabled() {
                    self.process_rx(rx);
                }
            }
            _ => {}
        }
    }
}

/// Test-only (issue 25 item 2, as `VHCA_TEST_PANIC` elsewhere): with
/// `VHCA_TEST_PANIC=net:tx` in the environment, the first TX kick panics in
/// the worker, once, so that tests can show how the panic is contained.
/// Unset, it costs a load and a compare.
fn test_panic(device_event: u16) {
    use std::sync::OnceLock;
    static ARMED: OnceLock<bool> = OnceLock::new();
    static FIRED: AtomicBool = AtomicBool::new(false);
    let armed =
        *ARMED.get_or_init(|| std::env::var("VHCA_TEST_PANIC").is_ok_and(|v| v == "net:tx"));
    if armed && device_event == TX_QUEUE && !FIRED.swap(true, Ordering::AcqRel) {
        panic!("VHCA_TEST_PANIC: a test panic in the vhost-user-net worker");
    }
}
