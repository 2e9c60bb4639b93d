//! The order inside one data-path round (issue 30 item 3): what the round's
//! received packets completed is in the CQ before the round's own packets go
//! out, so a receive's CQE does not wait for the system call that sends its
//! ACK (nor, on a small host, for the peer that send wakes).

use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex};

use super::*;
use device::fabric::{Link, LinkError, Received};
use transport::memory::MemError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// A CQE written into the CQ ring.
    Cqe,
    /// A packet handed to the link.
    Send,
}

type Log = Arc<Mutex<Vec<Step>>>;

/// A link that hands every packet sent back as received (the QPs are on one
/// device) and logs each send.
struct LoopLink {
    log: Log,
    inbox: VecDeque<Vec<u8>>,
}

impl Link for LoopLink {
    fn send(&mut self, _now: Duration, packet: &[u8]) -> Result<(), LinkError> {
        self.log.lock().unwrap().push(Step::Send);
        self.inbox.push_back(packet.to_vec());
        Ok(())
    }
    fn recv_batch(
        &mut self,
        _now: Duration,
        max: usize,
        deliver: &mut dyn FnMut(Received<'_>),
    ) -> Result<usize, LinkError> {
        let mut n = 0;
        while n < max {
            let Some(p) = self.inbox.pop_front() else {
                break;
            };
            deliver(Received {
                packet: &p,
                lent: None,
                src_lid: Some(LID),
                crcs_vouched: false,
            });
            n += 1;
        }
        Ok(n)
    }
    fn raw_fd(&self) -> RawFd {
        -1
    }
    fn poll_timeout(&self) -> Option<Duration> {
        (!self.inbox.is_empty()).then_some(Duration::ZERO)
    }
    fn handle_timeout(&mut self, _now: Duration) -> Result<(), LinkError> {
        Ok(())
    }
}

/// The guest memory, logging the writes of whole CQEs into the CQ ring.
struct Spy<'a> {
    mem: &'a mut VecMemory,
    cqes: Vec<u64>,
    log: Log,
}

impl Memory for Spy<'_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemError> {
        self.mem.read(addr, buf)
    }
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), MemError> {
        if self.cqes.contains(&addr) {
            self.log.lock().unwrap().push(Step::Cqe);
        }
        self.mem.write(addr, data)
    }
    fn compare_swap(&mut self, addr: u64, compare: u64, swap: u64) -> Result<u64, MemError> {
        self.mem.compare_swap(addr, compare, swap)
    }
    fn fetch_add(&mut self, addr: u64, add: u64) -> Result<u64, MemError> {
        self.mem.fetch_add(addr, add)
    }
    fn atomic_write(&mut self, addr: u64, value: u64) -> Result<(), MemError> {
        self.mem.atomic_write(addr, value)
    }
}

#[test]
fn a_received_sends_cqe_is_written_before_the_rounds_ack_goes_out() {
    let (mut d, cq, a, b) = setup();
    let log = Log::default();
    // The same device on a link that loops back and logs.
    let engine = std::mem::replace(
        d.hca.port.engine_mut(),
        Engine::new(PortConfig::new(LID, 0), Limits::default()),
    );
    d.hca.port = Port::new(
        engine,
        Box::new(LoopLink {
            log: log.clone(),
            inbox: VecDeque::new(),
        }),
    );
    post_recv(&mut d, b, 77, DATA + 0x10000, 64);
    let w = signaled_send(&d, 5, DATA, 8);
    post_send(&mut d, a, &w);
    let ring = &d.hca.cqs[&cq].ring;
    let cqes: Vec<u64> = (0..8).map(|i| ring.entry_addr(i)).collect();
    let mut rounds = Vec::new();
    for _ in 0..4 {
        log.lock().unwrap().clear();
        let mut spy = Spy {
            mem: &mut d.mem,
            cqes: cqes.clone(),
            log: log.clone(),
        };
        d.hca
            .run_once(&mut spy, &d.db, &d.irq, Duration::from_millis(1));
        rounds.push(log.lock().unwrap().clone());
    }
    // Round 1 sends the SEND; round 2 receives it: B's receive completes and
    // its ACK goes out, the CQE first; round 3 completes A's SEND.
    assert_eq!(rounds[0], [Step::Send], "{rounds:?}");
    assert_eq!(rounds[1], [Step::Cqe, Step::Send], "{rounds:?}");
    assert_eq!(rounds[2], [Step::Cqe], "{rounds:?}");
    assert_eq!(rounds[3], [], "{rounds:?}");
    let mut got = [poll_cq(&mut d, cq).unwrap(), poll_cq(&mut d, cq).unwrap()];
    got.sort_by_key(|e| e.wr_id);
    assert_eq!((got[0].wr_id, got[0].status), (5, 0));
    assert_eq!((got[1].wr_id, got[1].status, got[1].opcode), (77, 0, 128));
}
