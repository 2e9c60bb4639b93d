//! The typed commands of the device, its port, PDs, EQs, CQs, SRQs, MRs and
//! MWs, the handles they return and the driver's record of each object. QPs
//! are in `qp`.

use std::sync::atomic::Ordering;

use device::abi::cmd::{
    reg_mr_flags, AllocMwIn, AllocMwOut, AllocPdOut, CreateCqIn, CreateCqOut, CreateEqIn,
    CreateEqOut, CreateSrqIn, CreateSrqOut, DeallocMwIn, DeallocPdIn, DeregMrIn, DestroyCqIn,
    DestroyEqIn, DestroySrqIn, DeviceAttr, MapOdpIn, ModifySrqIn, MwType, OdpFaultFailIn, Opcode,
    Pbl, PortAttr, QueryCountersIn, QueryCountersOut, QueryPortIn, QuerySrqIn, QuerySrqOut,
    RegMrIn, RegMrOut, ReregMrIn, ResizeCqIn, ResizeCqOut, ResizeSrqIn, ResizeSrqOut, UnmapOdpIn,
};
use device::abi::counters::CounterSet;
use device::abi::cqe::entry_const;
use device::abi::uar::uar;
use device::abi::verbs::{num, srq_attr_mask};
use device::abi::wqe::{wqe_const, RecvCtrl, Sge};

use crate::guest::{Buf, Layout, PAGE};
use crate::util::log2_ceil;

use super::{CmdError, DbSlot, Hca, Nothing, PblKind, QpH, Ring};

/// A protection domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Pd(pub u32);

/// An event queue (EQ 0 is the async EQ, not created by command).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EqH {
    pub eqn: u32,
    pub vector: u32,
}

/// A completion queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CqH {
    pub cqn: u32,
}

/// A shared receive queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SrqH {
    pub srqn: u32,
}

/// A registered memory region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mr {
    pub lkey: u32,
    pub rkey: u32,
    pub pdn: u32,
    pub iova: u64,
    pub length: u64,
    pub access: u32,
    /// Pages holding the page list.
    pub meta: Vec<u64>,
}

impl Mr {
    /// An SGE over `[off, off + len)` of `buf` through this MR.
    pub fn sge(&self, buf: &Buf, off: usize, len: usize) -> Sge {
        Sge {
            addr: buf.va(off),
            length: len as u32,
            lkey: self.lkey,
        }
    }
}

pub(crate) struct EqState {
    pub ring: Ring,
    pub vector: u32,
    pub slot: DbSlot,
    pub ci: u32,
    pub arm: u32,
}

pub(crate) struct CqState {
    pub ring: Ring,
    pub slot: DbSlot,
    pub ci: u32,
    pub arm_sn: u32,
    pub eqn: u32,
    pub entries: u32,
}

pub(crate) struct SrqState {
    pub ring: Ring,
    pub slot: DbSlot,
    pub pi: u32,
    pub outstanding: u32,
    pub max_wr: u32,
    pub max_sge: u32,
}

impl Hca {
    pub fn nop(&mut self) -> Result<(), CmdError> {
        self.cmd::<Nothing, Nothing>(Opcode::Nop, &Nothing)
            .map(|_| ())
    }

    pub fn query_device(&mut self) -> Result<DeviceAttr, CmdError> {
        self.cmd(Opcode::QueryDevice, &Nothing)
    }

    pub fn query_port(&mut self, port: u8) -> Result<PortAttr, CmdError> {
        self.cmd(Opcode::QueryPort, &QueryPortIn { port, rsvd: [0; 3] })
    }

    /// One counter set: its values (`count` of them).
    pub fn query_counters(&mut self, set: CounterSet) -> Result<Vec<u64>, CmdError> {
        let o: QueryCountersOut = self.cmd(
            Opcode::QueryCounters,
            &QueryCountersIn {
                port: num::PORT as u8,
                set: set.raw(),
                rsvd: 0,
            },
        )?;
        let n = (o.count as usize).min(o.values.len());
        Ok(o.values[..n].to_vec())
    }

    /// A counter of `set` by name (`retransmits`, `bad_wqes`, ...).
    pub fn counter(&mut self, set: CounterSet, name: &str) -> Result<Option<u64>, CmdError> {
        let v = self.query_counters(set)?;
        Ok(set
            .names()
            .iter()
            .position(|n| n == name)
            .and_then(|i| v.get(i).copied()))
    }

    /// A port counter by name (`rx_packets`, `retransmits`, ...).
    pub fn port_counter(&mut self, name: &str) -> Result<Option<u64>, CmdError> {
        self.counter(CounterSet::Port, name)
    }

    pub fn alloc_pd(&mut self) -> Result<Pd, CmdError> {
        let o: AllocPdOut = self.cmd(Opcode::AllocPd, &Nothing)?;
        self.pds.insert(o.pdn);
        Ok(Pd(o.pdn))
    }

    pub fn dealloc_pd(&mut self, pd: Pd) -> Result<(), CmdError> {
        self.cmd::<_, Nothing>(Opcode::DeallocPd, &DeallocPdIn { pdn: pd.0 })?;
        self.pds.remove(&pd.0);
        Ok(())
    }

    /// A completion EQ of 2^log2 entries on MSI-X `vector`.
    pub fn create_eq(&mut self, log2: u32, vector: u32) -> Result<EqH, CmdError> {
        let ring = self.alloc_ring(log2, 4, Layout::Scattered);
        let slot = self.alloc_slot(Some(uar::KERNEL_UAR));
        self.clear_slot(slot)?;
        let input = CreateEqIn {
            ring: ring.pbl,
            uar: slot.uar,
            db_slot: slot.slot,
            vector: vector as u16,
            log2_entries: log2 as u8,
            rsvd: [0; 7],
        };
        match self.cmd::<_, CreateEqOut>(Opcode::CreateEq, &input) {
            Ok(o) => {
                // Arm it: a changed arm word allows the first interrupt.
                self.g.bar2_store32(slot.offset() + 4, 1)?;
                self.eqs.insert(
                    o.eqn,
                    EqState {
                        ring,
                        vector,
                        slot,
                        ci: 0,
                        arm: 1,
                    },
                );
                Ok(EqH { eqn: o.eqn, vector })
            }
            Err(e) => {
                self.free_ring(&ring);
                self.free_slot(slot);
                Err(e)
            }
        }
    }

    pub fn destroy_eq(&mut self, eq: EqH) -> Result<(), CmdError> {
        self.cmd::<_, Nothing>(Opcode::DestroyEq, &DestroyEqIn { eqn: eq.eqn })?;
        if let Some(s) = self.eqs.remove(&eq.eqn) {
            self.free_ring(&s.ring);
            self.free_slot(s.slot);
        }
        Ok(())
    }

    /// A CQ of 2^log2 entries reporting events to EQ `eqn` (0: the async EQ).
    pub fn create_cq(&mut self, log2: u32, eqn: u32) -> Result<CqH, CmdError> {
        self.create_cq_with(log2, eqn, Layout::Scattered, None)
    }

    pub fn create_cq_with(
        &mut self,
        log2: u32,
        eqn: u32,
        layout: Layout,
        uar_page: Option<u32>,
    ) -> Result<CqH, CmdError> {
        let ring = self.alloc_ring(log2, 6, layout);
        let slot = self.alloc_slot(uar_page);
        self.clear_slot(slot)?;
        let input = CreateCqIn {
            ring: ring.pbl,
            eqn,
            uar: slot.uar,
            db_slot: slot.slot,
            log2_entries: log2 as u8,
            rsvd: [0; 5],
        };
        match self.cmd::<_, CreateCqOut>(Opcode::CreateCq, &input) {
            Ok(o) => {
                self.cqs.insert(
                    o.cqn,
                    CqState {
                        ring,
                        slot,
                        ci: 0,
                        arm_sn: 0,
                        eqn,
                        entries: o.entries,
                    },
                );
                Ok(CqH { cqn: o.cqn })
            }
            Err(e) => {
                self.free_ring(&ring);
                self.free_slot(slot);
                Err(e)
            }
        }
    }

    pub fn destroy_cq(&mut self, cq: CqH) -> Result<(), CmdError> {
        self.cmd::<_, Nothing>(Opcode::DestroyCq, &DestroyCqIn { cqn: cq.cqn })?;
        if let Some(s) = self.cqs.remove(&cq.cqn) {
            self.free_ring(&s.ring);
            self.free_slot(s.slot);
        }
        Ok(())
    }

    /// RESIZE_CQ onto a new scattered ring of 2^log2 CQEs, as a driver does
    /// (abi::cmd RESIZE_PROTOCOL): store ci, run the command, then switch
    /// rings keeping ci. The new ring is filled with garbage first (owner bits
    /// set), since the device must initialise it. Returns the new entries.
    pub fn resize_cq(&mut self, cq: CqH, log2: u32) -> Result<u32, CmdError> {
        let ring = self.alloc_ring(log2, 6, Layout::Scattered);
        for &p in &ring.pages {
            self.g.fill(p, PAGE as usize, 0xa5);
        }
        let input = ResizeCqIn {
            cqn: cq.cqn,
            log2_entries: log2 as u8,
            rsvd: [0; 3],
            ring: ring.pbl,
        };
        self.resize_cq_raw(cq, &input, ring)
    }

    /// RESIZE_CQ with the given input over `ring` (freed on failure).
    pub fn resize_cq_raw(
        &mut self,
        cq: CqH,
        input: &ResizeCqIn,
        ring: Ring,
    ) -> Result<u32, CmdError> {
        if let Some(c) = self.cqs.get(&cq.cqn) {
            let (off, ci) = (c.slot.offset(), c.ci);
            self.g.bar2_store32(off, ci)?;
        }
        match self.cmd::<_, ResizeCqOut>(Opcode::ResizeCq, input) {
            Ok(o) => {
                let old = match self.cqs.get_mut(&cq.cqn) {
                    Some(c) => {
                        c.entries = o.entries;
                        Some(std::mem::replace(&mut c.ring, ring))
                    }
                    None => Some(ring),
                };
                if let Some(old) = old {
                    self.free_ring(&old);
                }
                Ok(o.entries)
            }
            Err(e) => {
                self.free_ring(&ring);
                Err(e)
            }
        }
    }

    /// CQEs the device has written and the driver not polled (a peek).
    pub fn cq_ready(&self, cq: CqH) -> u32 {
        let Some(c) = self.cqs.get(&cq.cqn) else {
            return 0;
        };
        let mut n = 0u32;
        while n < c.ring.entries() {
            let i = c.ci.wrapping_add(n);
            let owner = self
                .g
                .ram_u8(c.ring.addr(i) + entry_const::CQE_SIZE as u64 - 1)
                .load(Ordering::Acquire);
            if owner & entry_const::OWNER_BIT as u8 != device::abi::cqe::owner_bit(i, c.ring.log2) {
                break;
            }
            n += 1;
        }
        n
    }

    /// The entries CREATE_CQ granted.
    pub fn cq_entries(&self, cq: CqH) -> u32 {
        self.cqs.get(&cq.cqn).map_or(0, |c| c.entries)
    }

    /// An SRQ of at least `max_wr` WQEs of `max_sge` SGEs, limit armed at `limit`.
    pub fn create_srq(
        &mut self,
        pd: Pd,
        max_wr: u32,
        max_sge: u32,
        limit: u32,
    ) -> Result<SrqH, CmdError> {
        self.create_srq_of(pd, max_wr, max_sge, limit, None)
    }

    /// ALLOC_XRCD (SR-02).
    pub fn alloc_xrcd(&mut self) -> Result<u32, CmdError> {
        let o: device::abi::cmd::AllocXrcdOut = self.cmd(Opcode::AllocXrcd, &Nothing)?;
        Ok(o.xrcdn)
    }

    /// DEALLOC_XRCD.
    pub fn dealloc_xrcd(&mut self, xrcdn: u32) -> Result<(), CmdError> {
        self.cmd::<_, Nothing>(
            Opcode::DeallocXrcd,
            &device::abi::cmd::DeallocXrcdIn { xrcdn },
        )
        .map(|_| ())
    }

    /// An XRC SRQ (SR-02) in XRC domain `xrcdn` whose receives complete on `cq`.
    pub fn create_xrc_srq(
        &mut self,
        pd: Pd,
        xrcdn: u32,
        cq: CqH,
        max_wr: u32,
        max_sge: u32,
    ) -> Result<SrqH, CmdError> {
        self.create_srq_of(pd, max_wr, max_sge, 0, Some((xrcdn, cq.cqn)))
    }

    fn create_srq_of(
        &mut self,
        pd: Pd,
        max_wr: u32,
        max_sge: u32,
        limit: u32,
        xrc: Option<(u32, u32)>,
    ) -> Result<SrqH, CmdError> {
        let log2 = log2_ceil(u64::from(max_wr.max(1)));
        let shift = log2_ceil(u64::from(
            RecvCtrl::SIZE as u32 + max_sge * Sge::SIZE as u32,
        ))
        .max(wqe_const::RQ_MIN_WQE_SHIFT);
        let ring = self.alloc_ring(log2, shift, Layout::Scattered);
        let slot = self.alloc_slot(None);
        self.clear_slot(slot)?;
        let input = CreateSrqIn {
            srq_type: u8::from(xrc.is_some()),
            rsvd: [0; 3],
            xrcdn: xrc.map_or(0, |x| x.0),
            cqn: xrc.map_or(0, |x| x.1),
            rsvd2: 0,
            pdn: pd.0,
            max_wr,
            max_sge,
            srq_limit: limit,
            uar: slot.uar,
            db_slot: slot.slot,
            log2_entries: log2 as u8,
            wqe_shift: shift as u8,
            ring: ring.pbl,
        };
        match self.cmd::<_, CreateSrqOut>(Opcode::CreateSrq, &input) {
            Ok(o) => {
                self.srqs.insert(
                    o.srqn,
                    SrqState {
                        ring,
                        slot,
                        pi: 0,
                        outstanding: 0,
                        max_wr: o.max_wr,
                        max_sge: o.max_sge,
                    },
                );
                Ok(SrqH { srqn: o.srqn })
            }
            Err(e) => {
                self.free_ring(&ring);
                self.free_slot(slot);
                Err(e)
            }
        }
    }

    /// Sets and arms the SRQ limit.
    pub fn arm_srq_limit(&mut self, srq: SrqH, limit: u32) -> Result<(), CmdError> {
        self.cmd::<_, Nothing>(
            Opcode::ModifySrq,
            &ModifySrqIn {
                srqn: srq.srqn,
                attr_mask: srq_attr_mask::LIMIT,
                max_wr: 0,
                srq_limit: limit,
            },
        )
        .map(|_| ())
    }

    pub fn modify_srq(&mut self, input: &ModifySrqIn) -> Result<(), CmdError> {
        self.cmd::<_, Nothing>(Opcode::ModifySrq, input).map(|_| ())
    }

    pub fn query_srq(&mut self, srq: SrqH) -> Result<QuerySrqOut, CmdError> {
        self.cmd(Opcode::QuerySrq, &QuerySrqIn { srqn: srq.srqn })
    }

    /// RESIZE_SRQ onto a new ring of 2^log2 WQEs of the SRQ's stride, as a
    /// driver does: no post meanwhile, then switch rings keeping pi. Returns
    /// the new max_wr.
    pub fn resize_srq(&mut self, srq: SrqH, max_wr: u32, log2: u32) -> Result<u32, CmdError> {
        let shift = self.srqs.get(&srq.srqn).map_or(5, |s| s.ring.shift);
        let ring = self.alloc_ring(log2, shift, Layout::Scattered);
        let input = ResizeSrqIn {
            srqn: srq.srqn,
            max_wr,
            log2_entries: log2 as u8,
            rsvd: [0; 7],
            ring: ring.pbl,
        };
        match self.cmd::<_, ResizeSrqOut>(Opcode::ResizeSrq, &input) {
            Ok(o) => {
                let old = match self.srqs.get_mut(&srq.srqn) {
                    Some(s) => {
                        s.max_wr = o.max_wr;
                        std::mem::replace(&mut s.ring, ring)
                    }
                    None => ring,
                };
                self.free_ring(&old);
                Ok(o.max_wr)
            }
            Err(e) => {
                self.free_ring(&ring);
                Err(e)
            }
        }
    }

    pub fn destroy_srq(&mut self, srq: SrqH) -> Result<(), CmdError> {
        self.cmd::<_, Nothing>(Opcode::DestroySrq, &DestroySrqIn { srqn: srq.srqn })?;
        if let Some(s) = self.srqs.remove(&srq.srqn) {
            self.free_ring(&s.ring);
            self.free_slot(s.slot);
        }
        Ok(())
    }

    /// REG_MR over `buf` at its virtual address, pages described with `kind`.
    pub fn reg_mr(
        &mut self,
        pd: Pd,
        buf: &Buf,
        access: u32,
        kind: PblKind,
    ) -> Result<Mr, CmdError> {
        let (pbl, meta) = self.make_pbl(&buf.pages, kind);
        let input = RegMrIn {
            pdn: pd.0,
            access,
            iova: buf.va,
            length: buf.len as u64,
            flags: 0,
            rsvd: 0,
            pbl,
        };
        self.reg_mr_raw(&input, meta)
    }

    /// REG_MR with every field given; `meta` are pages to free with the MR.
    pub fn reg_mr_raw(&mut self, input: &RegMrIn, meta: Vec<u64>) -> Result<Mr, CmdError> {
        match self.cmd::<_, RegMrOut>(Opcode::RegMr, input) {
            Ok(o) => {
                self.mrs.insert(o.lkey, meta.clone());
                Ok(Mr {
                    lkey: o.lkey,
                    rkey: o.rkey,
                    pdn: input.pdn,
                    iova: input.iova,
                    length: input.length,
                    access: input.access,
                    meta,
                })
            }
            Err(e) => {
                self.g.free_pages(&meta);
                Err(e)
            }
        }
    }

    /// The identity DMA MR over all guest memory (kernel verbs' get_dma_mr):
    /// SGE addresses are guest-physical.
    pub fn reg_dma_mr(&mut self, pd: Pd, access: u32) -> Result<Mr, CmdError> {
        let input = RegMrIn {
            pdn: pd.0,
            access,
            iova: 0,
            length: u64::MAX,
            flags: reg_mr_flags::DMA,
            rsvd: 0,
            pbl: Pbl::default(),
        };
        self.reg_mr_raw(&input, Vec::new())
    }

    pub fn rereg_mr(&mut self, input: &ReregMrIn) -> Result<RegMrOut, CmdError> {
        self.cmd(Opcode::ReregMr, input)
    }

    pub fn dereg_mr(&mut self, mr: &Mr) -> Result<(), CmdError> {
        self.cmd::<_, Nothing>(Opcode::DeregMr, &DeregMrIn { lkey: mr.lkey })?;
        if let Some(meta) = self.mrs.remove(&mr.lkey) {
            self.g.free_pages(&meta);
        }
        Ok(())
    }

    /// REG_MR with FAST (MP-08): a free fast-registration MR for up to
    /// `max_pages` pages; its key.
    pub fn alloc_fast_mr(&mut self, pd: Pd, max_pages: u32) -> Result<u32, CmdError> {
        let input = RegMrIn {
            pdn: pd.0,
            access: 0,
            iova: 0,
            length: 0,
            flags: reg_mr_flags::FAST,
            rsvd: 0,
            pbl: Pbl {
                npages: max_pages,
                ..Pbl::default()
            },
        };
        let o: RegMrOut = self.cmd(Opcode::RegMr, &input)?;
        Ok(o.lkey)
    }

    /// DEREG_MR by key alone (a fast-registration MR: any key byte of its index).
    pub fn dereg_key(&mut self, lkey: u32) -> Result<(), CmdError> {
        self.cmd::<_, Nothing>(Opcode::DeregMr, &DeregMrIn { lkey })?;
        Ok(())
    }

    /// REG_MR with ODP (issue 29): `[iova, iova + length)`, no pages.
    pub fn reg_odp_mr(
        &mut self,
        pd: Pd,
        iova: u64,
        length: u64,
        access: u32,
    ) -> Result<Mr, CmdError> {
        let input = RegMrIn {
            pdn: pd.0,
            access,
            iova,
            length,
            flags: reg_mr_flags::ODP,
            rsvd: 0,
            pbl: Pbl::default(),
        };
        self.reg_mr_raw(&input, Vec::new())
    }

    /// MAP_ODP: guest-physical `pages` (4 KiB each) for ODP MR `lkey` from the
    /// 4 KiB-aligned `va` on, the page list in a one-level list.
    pub fn map_odp(&mut self, lkey: u32, va: u64, pages: &[u64]) -> Result<(), CmdError> {
        let (pbl, meta) = self.make_pbl(pages, PblKind::OneLevel);
        let r = self.cmd::<_, Nothing>(
            Opcode::MapOdp,
            &MapOdpIn {
                lkey,
                rsvd: 0,
                va,
                pbl,
            },
        );
        self.g.free_pages(&meta);
        r.map(|_| ())
    }

    /// UNMAP_ODP of `[va, va + length)` of ODP MR `lkey`.
    pub fn unmap_odp(&mut self, lkey: u32, va: u64, length: u64) -> Result<(), CmdError> {
        let i = UnmapOdpIn {
            lkey,
            rsvd: 0,
            va,
            length,
        };
        self.cmd::<_, Nothing>(Opcode::UnmapOdp, &i).map(|_| ())
    }

    /// ODP_FAULT_FAIL of `[va, va + length)` of ODP MR `lkey`.
    pub fn odp_fault_fail(&mut self, lkey: u32, va: u64, length: u64) -> Result<(), CmdError> {
        let i = OdpFaultFailIn {
            lkey,
            rsvd: 0,
            va,
            length,
        };
        self.cmd::<_, Nothing>(Opcode::OdpFaultFail, &i).map(|_| ())
    }

    /// ALLOC_MW (MP-06 type 1, MP-07 type 2B): the window's first R_Key.
    pub fn alloc_mw(&mut self, pd: Pd, ty: MwType) -> Result<u32, CmdError> {
        let o: AllocMwOut = self.cmd(
            Opcode::AllocMw,
            &AllocMwIn {
                pdn: pd.0,
                mw_type: ty.raw(),
            },
        )?;
        Ok(o.rkey)
    }

    /// DEALLOC_MW by the window's current R_Key.
    pub fn dealloc_mw(&mut self, rkey: u32) -> Result<(), CmdError> {
        self.cmd::<_, Nothing>(Opcode::DeallocMw, &DeallocMwIn { rkey })?;
        Ok(())
    }

    /// ATTACH_MCAST (AD-08): UD QP `qpn` joins the group `gid` (MLID `mlid`).
    pub fn attach_mcast(&mut self, qpn: u32, gid: [u8; 16], mlid: u16) -> Result<(), CmdError> {
        let i = device::abi::cmd::McastIn {
            qpn,
            mlid,
            rsvd: 0,
            gid,
        };
        self.cmd::<_, Nothing>(Opcode::AttachMcast, &i)?;
        Ok(())
    }

    /// DETACH_MCAST (AD-08).
    pub fn detach_mcast(&mut self, qpn: u32, gid: [u8; 16], mlid: u16) -> Result<(), CmdError> {
        let i = device::abi::cmd::McastIn {
            qpn,
            mlid,
            rsvd: 0,
            gid,
        };
        self.cmd::<_, Nothing>(Opcode::DetachMcast, &i)?;
        Ok(())
    }

    /// Live objects the driver knows of: (PDs, MRs, CQs, QPs, SRQs, EQs).
    pub fn object_counts(&self) -> (usize, usize, usize, usize, usize, usize) {
        (
            self.pds.len(),
            self.mrs.len(),
            self.cqs.len(),
            self.qps.len(),
            self.srqs.len(),
            self.eqs.len(),
        )
    }

    /// The doorbell slot of a QP, CQ or SRQ (for raw tests).
    pub fn qp_slot(&self, qp: QpH) -> DbSlot {
        self.qps[&qp.qpn].slot
    }

    pub fn cq_slot(&self, cq: CqH) -> DbSlot {
        self.cqs[&cq.cqn].slot
    }

    pub fn srq_slot(&self, srq: SrqH) -> DbSlot {
        self.srqs[&srq.srqn].slot
    }
}

/// Reliable Datagram commands (AD-11): RD domains and EE contexts.
impl Hca {
    /// ALLOC_RDD.
    pub fn alloc_rdd(&mut self) -> Result<u32, CmdError> {
        let o: device::abi::cmd::AllocRddOut = self.cmd(Opcode::AllocRdd, &Nothing)?;
        Ok(o.rddn)
    }

    /// DEALLOC_RDD.
    pub fn dealloc_rdd(&mut self, rddn: u32) -> Result<(), CmdError> {
        self.cmd::<_, Nothing>(Opcode::DeallocRdd, &device::abi::cmd::DeallocRddIn { rddn })
            .map(|_| ())
    }

    /// CREATE_EEC in RD domain `rddn`; its EECN.
    pub fn create_eec(&mut self, rddn: u32) -> Result<u32, CmdError> {
        let o: device::abi::cmd::CreateEecOut =
            self.cmd(Opcode::CreateEec, &device::abi::cmd::CreateEecIn { rddn })?;
        Ok(o.eecn)
    }

    /// MODIFY_EEC to `attr.state` with the fields of that transition.
    pub fn modify_eec(
        &mut self,
        eecn: u32,
        attr: &device::abi::cmd::EecAttr,
    ) -> Result<(), CmdError> {
        let input = device::abi::cmd::ModifyEecIn {
            eecn,
            rsvd: 0,
            attr: *attr,
        };
        self.cmd::<_, Nothing>(Opcode::ModifyEec, &input)
            .map(|_| ())
    }

    /// QUERY_EEC.
    pub fn query_eec(&mut self, eecn: u32) -> Result<device::abi::cmd::QueryEecOut, CmdError> {
        self.cmd(Opcode::QueryEec, &device::abi::cmd::QueryEecIn { eecn })
    }

    /// DESTROY_EEC.
    pub fn destroy_eec(&mut self, eecn: u32) -> Result<(), CmdError> {
        self.cmd::<_, Nothing>(Opcode::DestroyEec, &device::abi::cmd::DestroyEecIn { eecn })
            .map(|_| ())
    }
}
