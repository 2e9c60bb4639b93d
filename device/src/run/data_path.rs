//! The data-path thread of the running device (`run`'s module doc): rounds of
//! `Hca::run_once` while there is work and for the busy-poll time after it,
//! then asleep on epoll with the `asleep` word set in every doorbell page
//! (abi::uar DOORBELL_PROTOCOL; ARCHITECTURE.md §2).

use super::sleep::BusyPoll;
use super::*;

/// Stores `value` in the `asleep` word of every doorbell page (abi::uar).
fn set_asleep(db: &BarDoorbells<'_>, num_uars: u32, value: u32) {
    for u in 0..num_uars {
        db.store(u64::from(u) * u64::from(abi::uar::uar::PAGE_SIZE), value);
    }
}

/// How long the data path pauses after a round in which the link failed.
const LINK_ERROR_BACKOFF: Duration = Duration::from_millis(100);

/// The data path thread: runs the HCA while enabled, sleeps when idle (the
/// sleep protocol of abi::uar DOORBELL_PROTOCOL; module doc of `run`).
pub fn data_path(shared: Arc<Shared>, mut counters: CountersOutput, busy_poll: Duration) {
    let handle = shared.handle.clone();
    let Some(bar2) = handle.bar_memory(abi::ident::bar::BAR2_INDEX as usize) else {
        log::error!("device: BAR2 is not mapped; data path not started");
        return;
    };
    let db = BarDoorbells(bar2);
    let irq = Msix(&handle);
    let epoll = match Epoll::new() {
        Ok(e) => e,
        Err(e) => {
            log::error!("device: epoll: {e}");
            return;
        }
    };
    let (link_fd, dm_size) = {
        let core = shared.lock();
        // Fixed for the process's life (`--dm-size`).
        (core.hca.port.raw_fd(), core.hca.caps.dm_size)
    };
    // The WAKE eventfd edge-triggered: every write is one event, so the
    // counter needs no read(2) on the way to the round a WAKE asks for (issue
    // 30 item 3; it would take 2^64 WAKEs to fill it). The link stays
    // level-triggered: a round leaves what it did not read readable.
    let wake_events = EventSet::IN | EventSet::EDGE_TRIGGERED;
    for (fd, token, set) in [
        (link_fd, 1u64, EventSet::IN),
        (shared.wake.as_raw_fd(), 2u64, wake_events),
    ] {
        if let Err(e) = epoll.ctl(ControlOperation::Add, fd, EpollEvent::new(set, token)) {
            log::error!("device: epoll add: {e}");
            return;
        }
    }
    let num_uars = (db.len() / u64::from(abi::uar::uar::PAGE_SIZE)) as u32;
    let mut busy = BusyPoll::new(busy_poll);
    // The last round that scanned the doorbell summaries.
    let mut last_scan;
    let mut events = vec![EpollEvent::default(); 4];
    // A heavy command in progress: its pieces, done here without the lock
    // (cmdq::staged; issue 13, MMIO stall).
    let mut ticket: Option<cmdq::Ticket> = None;
    // The link was told the data path sleeps (`Port::set_link_sleeping`):
    // told it woke under the next round's lock, not a lock of its own.
    let mut link_asleep = false;
    while !shared.stop.load(Ordering::Acquire) {
        let prepared = ticket
            .take()
            .map(|t| t.prepare(&mut GuestMem::new(&handle, dm_size)));
        shared.yield_to_front();
        let t = now();
        last_scan = Instant::now();
        let (work, deadline, link_failed) = {
            let mut core = shared.lock();
            if std::mem::take(&mut link_asleep) {
                core.hca.port.set_link_sleeping(false);
            }
            let errors_before = core.hca.port.counters().link_errors;
            let (work, deadline) = if !core.enabled() {
                if shared.link_always {
                    // The engine of a disabled HCA has no QPs: RoCE frames are
                    // dropped and counted there, guest frames go on to the NIC.
                    let mut mem = GuestMem::new(&handle, dm_size);
                    let moved = core.hca.port.run_once(&mut mem, t);
                    (moved > 0, core.hca.port.next_deadline())
                } else {
                    (false, None)
                }
            } else {
                // Commands a CMDQ_PI write left (one batch a round, so
                // doorbells and packets are served in between).
                let cmds = if core.commands_pending() {
                    core.cmd_stats.data_path_batches += 1;
                    core.run_commands(&handle, prepared)
                } else {
                    0
                };
                ticket = core.cmdq.as_mut().and_then(CmdQueue::take_waiting);
                let mut mem = GuestMem::new(&handle, dm_size);
                let w = core.hca.run_once(&mut mem, &db, &irq, t);
                (
                    w.any() || cmds > 0 || ticket.is_some(),
                    core.hca.port.next_deadline(),
                )
            };
            let link_failed = core.hca.port.counters().link_errors != errors_before;
            (work, deadline, link_failed)
        };
        counters.tick(|| shared.lock().counters_snapshot());
        if link_failed {
            // A link that fails (a TAP deleted under us stays readable with an
            // error): back off instead of spinning on it; a transient error
            // costs one pause.
            std::thread::sleep(LINK_ERROR_BACKOFF);
        }
        if work {
            busy.worked();
            continue;
        }
        if busy.poll_again("device") {
            continue;
        }
        // Sleep protocol: asleep in every page, fence, rescan the doorbell
        // summaries (abi::uar DOORBELL_PROTOCOL; O(pages in use)).
        set_asleep(&db, num_uars, abi::uar::uar::ASLEEP);
        fence(Ordering::SeqCst);
        let pending = {
            let mut core = shared.lock();
            // The link's peers may wake it from now on (the shared-memory
            // rings' doorbells, issue 30); its deadline, taken after, sees
            // what came in before they could (a packet due now).
            core.hca.port.set_link_sleeping(true);
            link_asleep = true;
            let arrived = (core.enabled() || shared.link_always)
                && core
                    .hca
                    .port
                    .link()
                    .poll_timeout()
                    .is_some_and(|d| d <= now());
            core.commands_pending()
                || (core.enabled() && core.hca.doorbells_pending(&db))
                || arrived
        };
        // Asleep until an event (WAKE, a packet) or a deadline. A wake by a
        // deadline alone stays asleep: while the asleep word is set every
        // doorbell comes with a WAKE, so no producer index can have moved
        // unseen and only timers and the link have work; that round costs
        // O(work), not even a scan of the summaries (issue 12), and is
        // followed by no busy polling. Once a second the full round runs
        // anyway (a user library without the WAKE page relies on the rescan;
        // it still sets its summary bits).
        let mut woken = pending;
        let mut deadline = deadline;
        while !woken && !shared.stop.load(Ordering::Acquire) {
            let timeout = deadline
                .map(|d| d.saturating_sub(now()))
                .unwrap_or(MAX_SLEEP)
                .min(MAX_SLEEP);
            match sleep::wait(&epoll, timeout, &mut events) {
                Ok(0) => {}
                Ok(_) => {
                    woken = true;
                    break;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    log::warn!("device: epoll wait: {e}");
                    woken = true;
                    break;
                }
            }
            if last_scan.elapsed() >= RESCAN_EVERY {
                break;
            }
            let mut core = shared.lock();
            let mut mem = GuestMem::new(&handle, dm_size);
            if !core.enabled() {
                if shared.link_always {
                    // The link's own deadlines (keepalives, the TAP's state:
                    // AE-01) come due while disabled too; served here, not by
                    // spinning on a deadline past until the rescan.
                    let moved = core.hca.port.run_once(&mut mem, now());
                    deadline = core.hca.port.next_deadline();
                    woken = moved > 0;
                }
                continue;
            }
            let w = core.hca.run_timers(&mut mem, &db, &irq, now());
            deadline = core.hca.port.next_deadline();
            woken = w.any();
        }
        set_asleep(&db, num_uars, abi::uar::uar::AWAKE);
        if woken {
            busy.worked();
        }
    }
    shared.lock().hca.port.flush_link();
    shared.stopped.store(true, Ordering::Release);
}
