//! The data path's timed sleep on epoll, with the precision of the timers it
//! waits for.
//!
//! `epoll_wait` takes whole milliseconds. A deadline less than a millisecond
//! away truncated to a zero timeout makes the sleep a spin until it comes: on a
//! small host that is the CPU the guests' vCPUs need, and with probe timers
//! (recovery, issue 14) armed after every message a ping-pong between two TCG
//! guests ran ten times slower. `epoll_pwait2` (Linux 5.11) takes nanoseconds;
//! where the kernel lacks it the timeout is rounded up, never down (a timer
//! fires up to a millisecond late rather than the thread spinning).

use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use vmm_sys_util::epoll::{Epoll, EpollEvent};

/// A yield that kept the thread off the CPU this long means other threads
/// want this CPU (a guest's spinning vCPU, under TCG): a context switch alone
/// takes ~10 us even on a slow host, a scheduler time slice is ~1-3 ms.
const YIELD_LOST: Duration = Duration::from_micros(200);

/// After such a yield the thread does not busy-poll for this long: it sleeps
/// as soon as it is idle and comes back on an event, woken as a sleeper (which
/// the scheduler runs at once) instead of queued behind the spinning thread
/// for a whole slice (ib_send_lat between two TCG guests: 2.7-4 ms typical
/// with polling, 66-82 us without).
const CONTENDED_FOR: Duration = Duration::from_millis(100);

/// Busy polling after work, shared by the device's data path and the switch
/// (issue 26: a packet through a sleeping switch costs a wake-up per hop): a
/// loop that found nothing to do keeps polling for `window` after its last
/// work, yielding the CPU each turn, unless a yield showed the CPU contended.
#[derive(Debug, Clone)]
pub(crate) struct BusyPoll {
    window: Duration,
    last_work: Instant,
    /// Busy polling is off until this instant (after a lost yield).
    contended_until: Instant,
}

impl BusyPoll {
    pub(crate) fn new(window: Duration) -> BusyPoll {
        let now = Instant::now();
        BusyPoll {
            window,
            last_work: now,
            contended_until: now,
        }
    }

    /// The loop did work just now.
    pub(crate) fn worked(&mut self) {
        self.last_work = Instant::now();
    }

    /// The loop is idle: true after yielding the CPU once (poll again), false
    /// when it should sleep (the window is over, or the CPU is contended).
    pub(crate) fn poll_again(&mut self, who: &str) -> bool {
        let idle_from = Instant::now();
        if idle_from < self.contended_until
            || idle_from.saturating_duration_since(self.last_work) >= self.window
        {
            return false;
        }
        // Poll, but give the CPU to anything else runnable: on a small host
        // the guest's vCPU (or the test driver) may be waiting for this very
        // core, and a pure spin would make it wait a whole time slice.
        std::thread::yield_now();
        let lost = idle_from.elapsed();
        if lost >= YIELD_LOST {
            log::debug!("{who}: CPU contended (a yield took {lost:?}): sleep when idle");
            self.contended_until = Instant::now() + CONTENDED_FOR;
        }
        true
    }
}

/// The kernel said ENOSYS to `epoll_pwait2` once: milliseconds from then on.
static NO_PWAIT2: AtomicBool = AtomicBool::new(false);

/// `timeout` for `epoll_wait`: whole milliseconds, rounded up (a nonzero
/// timeout never becomes zero), at most `i32::MAX`.
pub(super) fn ceil_ms(timeout: Duration) -> i32 {
    let ms = timeout.as_nanos().div_ceil(1_000_000);
    ms.min(i32::MAX as u128) as i32
}

/// Waits on `epoll` for an event or `timeout`; returns how many events.
pub(crate) fn wait(
    epoll: &Epoll,
    timeout: Duration,
    events: &mut [EpollEvent],
) -> io::Result<usize> {
    if !NO_PWAIT2.load(Ordering::Relaxed) {
        match pwait2(epoll, timeout, events) {
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
                log::info!(
                    "device: no epoll_pwait2 (Linux < 5.11): timers wait whole milliseconds"
                );
                NO_PWAIT2.store(true, Ordering::Relaxed);
            }
            r => return r,
        }
    }
    epoll.wait(ceil_ms(timeout), events)
}

#[allow(unsafe_code)] // the one call, its SAFETY argument below
fn pwait2(epoll: &Epoll, timeout: Duration, events: &mut [EpollEvent]) -> io::Result<usize> {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    let max = events.len().min(i32::MAX as usize) as libc::c_int;
    // SAFETY: `EpollEvent` is `#[repr(transparent)]` over `libc::epoll_event`
    // (vmm-sys-util), so the slice is `max` writable epoll_events the kernel
    // fills; `ts` lives across the call; a null sigmask leaves the mask as is.
    let n = unsafe {
        libc::epoll_pwait2(
            epoll.as_raw_fd(),
            events.as_mut_ptr().cast::<libc::epoll_event>(),
            max,
            &ts,
            std::ptr::null(),
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_timeout_under_a_millisecond_is_not_a_zero_timeout() {
        assert_eq!(ceil_ms(Duration::ZERO), 0);
        assert_eq!(ceil_ms(Duration::from_micros(1)), 1);
        assert_eq!(ceil_ms(Duration::from_micros(999)), 1);
        assert_eq!(ceil_ms(Duration::from_millis(2)), 2);
        assert_eq!(ceil_ms(Duration::from_micros(2_001)), 3);
        assert_eq!(ceil_ms(Duration::from_secs(u64::MAX)), i32::MAX);
    }

    #[test]
    fn a_sub_millisecond_wait_sleeps_once_instead_of_spinning() {
        let epoll = Epoll::new().unwrap();
        let mut events = vec![EpollEvent::default(); 4];
        // 300 us, five times: each wait returns no event, after at least the
        // timeout (a spin would return at once).
        for _ in 0..5 {
            let t = Instant::now();
            assert_eq!(
                wait(&epoll, Duration::from_micros(300), &mut events).unwrap(),
                0
            );
            assert!(
                t.elapsed() >= Duration::from_micros(300),
                "{:?}",
                t.elapsed()
            );
        }
    }
}
