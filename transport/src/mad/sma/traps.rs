//! The traps an SMA sends and resends until the SM represses them (IBA 14.2.5.1,
//! 13.4.8.1), shared by the HCA's SMA and the switch's: a bounded queue, each
//! trap LID-routed to PortInfo:MasterSMLID at MasterSMSL and resent every
//! PortInfo:SubnetTimeOut until a TrapRepress names its TID.
//!
//! The HCA's queue resends a trap until it is repressed; the switch's
//! ([`TrapQueue::bounded`]) gives one up after a bounded number of sends (issue
//! 26 item 7: a switch whose SM never answers does not resend forever), and
//! keeps at most one of a kind outstanding where asked ([`TrapQueue::queue_once`]:
//! trap 128, whose one notice says "a link changed", IBA 14.2.5.1).

use std::collections::VecDeque;

use super::{SmaDrop, TrapOut, MAX_PENDING_TRAPS, MIN_TRAP_RESEND_NS};
use crate::mad::attr::{attr_id, NoticeRepr};
use crate::mad::header::{method, SmpRepr, SmpRoute, BASE_VERSION, SMP_CLASS_VERSION};
use crate::mad::portinfo::PortInfoRepr;
use crate::mad::SMP_DATA_LEN;
use crate::verbs::Time;

#[derive(Debug, Clone)]
struct PendingTrap {
    tid: u64,
    notice: NoticeRepr,
    next_send: Time,
    /// Sends so far.
    sends: u32,
    /// Queued again while outstanding ([`TrapQueue::queue_once`]): once this
    /// one is repressed or given up it goes out once more, with a new TID.
    again: bool,
}

/// Traps sent (or due) and not yet repressed.
#[derive(Debug, Clone)]
pub(crate) struct TrapQueue {
    traps: VecDeque<PendingTrap>,
    next_tid: u64,
    /// Sends of one trap before it is given up; `None`: until repressed.
    max_sends: Option<u32>,
}

impl Default for TrapQueue {
    fn default() -> TrapQueue {
        TrapQueue {
            traps: VecDeque::new(),
            next_tid: 1,
            max_sends: None,
        }
    }
}

impl TrapQueue {
    /// A queue whose traps are given up after `max_sends` sends unrepressed
    /// (see [`TrapQueue::give_up`]).
    pub fn bounded(max_sends: u32) -> TrapQueue {
        TrapQueue {
            max_sends: Some(max_sends.max(1)),
            ..TrapQueue::default()
        }
    }

    fn take_tid(&mut self) -> u64 {
        let tid = self.next_tid;
        self.next_tid = self.next_tid.wrapping_add(1).max(1);
        tid
    }

    /// Queues generic trap `number` of type `ty` from a node of `producer_type`,
    /// issued by the port `pi`, first sent at `now`. Refused with no SM to send
    /// it to (MasterSMLID 0) or a full queue.
    pub fn queue(
        &mut self,
        pi: &PortInfoRepr,
        producer_type: u8,
        (ty, number): (u8, u16),
        details: [u8; 54],
        now: Time,
    ) -> Result<(), SmaDrop> {
        if pi.master_sm_lid == 0 {
            return Err(SmaDrop::NoSmLid);
        }
        if self.traps.len() >= MAX_PENDING_TRAPS {
            return Err(SmaDrop::TrapQueueFull);
        }
        let tid = self.take_tid();
        self.traps.push_back(PendingTrap {
            tid,
            notice: NoticeRepr {
                is_generic: true,
                notice_type: ty,
                producer_type: u32::from(producer_type),
                trap_number: number,
                issuer_lid: pi.lid,
                toggle: false,
                count: 0,
                data_details: details,
            },
            next_send: now,
            sends: 0,
            again: false,
        });
        Ok(())
    }

    /// As [`TrapQueue::queue`], but with at most one trap of this number
    /// outstanding: if one is, it is marked to go out once more (a new TID,
    /// at once) after it is repressed or given up, since what it reported may
    /// predate this change.
    pub fn queue_once(
        &mut self,
        pi: &PortInfoRepr,
        producer_type: u8,
        kind: (u8, u16),
        details: [u8; 54],
        now: Time,
    ) -> Result<(), SmaDrop> {
        if pi.master_sm_lid == 0 {
            return Err(SmaDrop::NoSmLid);
        }
        match self
            .traps
            .iter_mut()
            .find(|t| t.notice.trap_number == kind.1)
        {
            Some(t) => {
                t.again = true;
                Ok(())
            }
            None => self.queue(pi, producer_type, kind, details, now),
        }
    }

    /// Takes trap `i` off the queue, or, if it was queued again meanwhile,
    /// sends it afresh: a new TID, due at once.
    fn finish(&mut self, i: usize) {
        if self.traps[i].again {
            let tid = self.take_tid();
            let t = &mut self.traps[i];
            *t = PendingTrap {
                tid,
                next_send: Time(0),
                sends: 0,
                again: false,
                notice: t.notice,
            };
        } else {
            self.traps.remove(i);
        }
    }

    /// Gives up the traps sent `max_sends` times whose next resend is due at
    /// `now` (the SM had a whole resend interval to answer the last send);
    /// returns how many. Nothing for an unbounded queue.
    pub fn give_up(&mut self, now: Time) -> u64 {
        let Some(max) = self.max_sends else {
            return 0;
        };
        let mut n = 0;
        while let Some(i) = self
            .traps
            .iter()
            .position(|t| t.sends >= max && t.next_send <= now)
        {
            self.finish(i);
            n += 1;
        }
        n
    }

    /// A TrapRepress names the trap by its TID (IBA 13.4.8.1): that trap stops.
    pub fn repress(&mut self, smp: &SmpRepr) -> Result<(), SmaDrop> {
        if smp.attr_id != attr_id::NOTICE {
            return Err(SmaDrop::UnmatchedRepress);
        }
        let i = self
            .traps
            .iter()
            .position(|t| t.tid == smp.tid)
            .ok_or(SmaDrop::UnmatchedRepress)?;
        self.finish(i);
        Ok(())
    }

    /// The next trap due at `now` (first send or a resend), as a SubnTrap(Notice)
    /// LID-routed to the port's SM and carrying its M_Key. Call until `None`.
    /// A trap at its last send is not sent again (it waits for
    /// [`TrapQueue::give_up`]).
    pub fn poll_transmit(&mut self, pi: &PortInfoRepr, now: Time) -> Option<TrapOut> {
        // 4.096 us = 4096 ns per SubnetTimeOut unit.
        let interval = (4096u64 << pi.subnet_timeout.min(31)).max(MIN_TRAP_RESEND_NS);
        let max = self.max_sends.unwrap_or(u32::MAX);
        let t = self
            .traps
            .iter_mut()
            .find(|t| t.next_send <= now && t.sends < max)?;
        t.next_send = now.plus_ns(interval);
        t.sends = t.sends.saturating_add(1);
        let mut data = [0u8; SMP_DATA_LEN];
        // The notice was built from in-range values; emit cannot fail on 64 bytes.
        let _ = t.notice.emit(&mut data);
        let smp = SmpRepr {
            base_version: BASE_VERSION,
            class_version: SMP_CLASS_VERSION,
            method: method::TRAP,
            status: 0,
            tid: t.tid,
            attr_id: attr_id::NOTICE,
            attr_mod: 0,
            mkey: pi.mkey,
            route: SmpRoute::Lid,
            data,
        };
        Some(TrapOut {
            mad: Box::new(smp.to_bytes()),
            dlid: pi.master_sm_lid,
            sl: pi.master_sm_sl,
        })
    }

    pub fn len(&self) -> usize {
        self.traps.len()
    }

    /// When the next send is due.
    pub fn next_send(&self) -> Option<Time> {
        self.traps.iter().map(|t| t.next_send).min()
    }
}
