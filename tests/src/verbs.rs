//! Verbs over the rings: send and receive WQEs into SQ, RQ and SRQ rings
//! (abi::wqe WQE_LAYOUT), producer indices into BAR2 doorbell slots with the
//! asleep/WAKE protocol (abi::uar DOORBELL_PROTOCOL), CQEs and EQEs by the owner
//! convention (abi::cqe OWNER_CONVENTION), CQ and EQ arming; and raw access to
//! all of it for the fuzz tests.

use std::sync::atomic::{fence, Ordering};
use std::time::{Duration, Instant};

use device::abi::bar0::reg;
use device::abi::cqe::{entry_const, owner_bit, Cqe, Eqe, EqeType};
use device::abi::uar::{cq_arm, uar};
use device::abi::verbs::{send_flags, QpType, WcOpcode, WcStatus, WrOpcode};
use device::abi::wqe::{
    AtomicSeg, BindSeg, RaddrSeg, RdSeg, RecvCtrl, RegMrSeg, SendCtrl, Sge, UdSeg, XrcSeg,
};

use crate::guest;
use crate::hca::{CqH, EqH, Hca, QpH, SrqH};

/// A send work request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendWr {
    pub wr_id: u64,
    pub opcode: WrOpcode,
    /// `VHCA_SEND_*` (INLINE is added when `inline` is set).
    pub flags: u8,
    /// Immediate data or the R_Key to invalidate.
    pub imm: u32,
    pub sges: Vec<Sge>,
    /// Inline data instead of SGEs.
    pub inline: Option<Vec<u8>>,
    /// Remote address and R_Key (RDMA, atomics).
    pub remote: Option<(u64, u32)>,
    /// compare_add and swap (atomics).
    pub atomic: Option<(u64, u64)>,
    /// Destination (UD, GSI).
    pub ud: Option<UdSeg>,
    /// BIND_MW: the bind segment (the window's current R_Key is `imm`).
    pub bind: Option<BindSeg>,
    /// REG_MR: the registration segment (the MR's new key is `imm`).
    pub reg: Option<RegMrSeg>,
    /// XRC_INI QPs: the target's XRC SRQ (`struct vhca_xrc_seg`; SR-02).
    pub xrc_srqn: Option<u32>,
    /// RD QPs: the EE context, destination QP and Q_Key (`struct
    /// vhca_rd_seg`; AD-11).
    pub rd: Option<RdSeg>,
}

impl SendWr {
    pub fn new(opcode: WrOpcode, wr_id: u64) -> SendWr {
        SendWr {
            wr_id,
            opcode,
            flags: send_flags::SIGNALED,
            imm: 0,
            sges: Vec::new(),
            inline: None,
            remote: None,
            atomic: None,
            ud: None,
            bind: None,
            reg: None,
            xrc_srqn: None,
            rd: None,
        }
    }

    /// REG_MR (MP-08): registers the fast-registration MR at the index of
    /// `key` under `key` with `seg` (its page list in guest memory).
    pub fn reg_mr(wr_id: u64, key: u32, seg: RegMrSeg) -> SendWr {
        let mut w = SendWr::new(WrOpcode::RegMr, wr_id).imm(key);
        w.reg = Some(seg);
        w
    }

    /// BIND_MW (MP-06, MP-07): binds the window whose current R_Key is `mw`
    /// to `[addr, addr + length)` of the MR `mr_lkey` with `access`
    /// (`VHCA_ACCESS_REMOTE_*`); afterwards its R_Key is `new_rkey`.
    pub fn bind_mw(
        wr_id: u64,
        mw: u32,
        new_rkey: u32,
        mr_lkey: u32,
        addr: u64,
        length: u64,
        access: u32,
    ) -> SendWr {
        let mut w = SendWr::new(WrOpcode::BindMw, wr_id).imm(mw);
        w.bind = Some(BindSeg {
            addr,
            length,
            mr_lkey,
            new_rkey,
            access,
            rsvd: 0,
        });
        w
    }

    /// LOCAL_INV of `rkey` (MP-07).
    pub fn local_inv(wr_id: u64, rkey: u32) -> SendWr {
        SendWr::new(WrOpcode::LocalInv, wr_id).imm(rkey)
    }

    /// SEND with Invalidate of the peer's `rkey` (OP-03).
    pub fn send_inv(wr_id: u64, rkey: u32) -> SendWr {
        SendWr::new(WrOpcode::SendWithInv, wr_id).imm(rkey)
    }

    pub fn send(wr_id: u64) -> SendWr {
        SendWr::new(WrOpcode::Send, wr_id)
    }

    pub fn send_imm(wr_id: u64, imm: u32) -> SendWr {
        SendWr::new(WrOpcode::SendWithImm, wr_id).imm(imm)
    }

    pub fn write(wr_id: u64, raddr: u64, rkey: u32) -> SendWr {
        SendWr::new(WrOpcode::RdmaWrite, wr_id).remote(raddr, rkey)
    }

    pub fn write_imm(wr_id: u64, raddr: u64, rkey: u32, imm: u32) -> SendWr {
        SendWr::new(WrOpcode::RdmaWriteWithImm, wr_id)
            .remote(raddr, rkey)
            .imm(imm)
    }

    pub fn read(wr_id: u64, raddr: u64, rkey: u32) -> SendWr {
        SendWr::new(WrOpcode::RdmaRead, wr_id).remote(raddr, rkey)
    }

    pub fn cmp_swap(wr_id: u64, raddr: u64, rkey: u32, compare: u64, swap: u64) -> SendWr {
        let mut w = SendWr::new(WrOpcode::AtomicCmpSwap, wr_id).remote(raddr, rkey);
        w.atomic = Some((compare, swap));
        w
    }

    pub fn fetch_add(wr_id: u64, raddr: u64, rkey: u32, add: u64) -> SendWr {
        let mut w = SendWr::new(WrOpcode::AtomicFetchAdd, wr_id).remote(raddr, rkey);
        w.atomic = Some((add, 0));
        w
    }

    /// RDMA FLUSH (IBA 1.5 MPE) of `len` bytes at `raddr` with placement type
    /// `ptype` and selectivity level `level` (`VHCA_FLUSH_*`).
    pub fn flush(wr_id: u64, raddr: u64, rkey: u32, len: u64, ptype: u32, level: u32) -> SendWr {
        let mut w = SendWr::new(WrOpcode::Flush, wr_id)
            .remote(raddr, rkey)
            .imm(ptype | (level << 4));
        w.atomic = Some((len, 0));
        w
    }

    /// RDMA ATOMIC WRITE (IBA 1.5 MPE) of the 8 bytes `word` at `raddr`.
    pub fn atomic_write(wr_id: u64, raddr: u64, rkey: u32, word: [u8; 8]) -> SendWr {
        let mut w = SendWr::new(WrOpcode::AtomicWrite, wr_id).remote(raddr, rkey);
        w.atomic = Some((u64::from_le_bytes(word), 0));
        w
    }

    pub fn sge(mut self, s: Sge) -> SendWr {
        self.sges.push(s);
        self
    }

    pub fn sges(mut self, s: Vec<Sge>) -> SendWr {
        self.sges = s;
        self
    }

    pub fn inline(mut self, data: &[u8]) -> SendWr {
        self.inline = Some(data.to_vec());
        self
    }

    pub fn remote(mut self, raddr: u64, rkey: u32) -> SendWr {
        self.remote = Some((raddr, rkey));
        self
    }

    pub fn imm(mut self, imm: u32) -> SendWr {
        self.imm = imm;
        self
    }

    pub fn flags(mut self, flags: u8) -> SendWr {
        self.flags = flags;
        self
    }

    pub fn unsignaled(mut self) -> SendWr {
        self.flags &= !send_flags::SIGNALED;
        self
    }

    pub fn solicited(mut self) -> SendWr {
        self.flags |= send_flags::SOLICITED;
        self
    }

    pub fn fence(mut self) -> SendWr {
        self.flags |= send_flags::FENCE;
        self
    }

    pub fn ud(mut self, dest: UdSeg) -> SendWr {
        self.ud = Some(dest);
        self
    }

    /// RD QPs (AD-11): send through EE context `eecn` to QP `remote_qpn`
    /// with Q_Key `qkey`.
    pub fn rd(mut self, eecn: u32, remote_qpn: u32, qkey: u32) -> SendWr {
        self.rd = Some(RdSeg {
            eecn,
            remote_qpn,
            remote_qkey: qkey,
            rsvd: 0,
        });
        self
    }

    /// The XRC SRQ of the target an XRC_INI QP's WR goes to (SR-02).
    pub fn xrc(mut self, srqn: u32) -> SendWr {
        self.xrc_srqn = Some(srqn);
        self
    }

    /// Bytes of payload the WR carries.
    pub fn payload_len(&self) -> usize {
        match &self.inline {
            Some(d) => d.len(),
            None => self.sges.iter().map(|s| s.length as usize).sum(),
        }
    }
}

/// A UD destination.
pub fn ud_dest(dlid: u16, qpn: u32, qkey: u32) -> UdSeg {
    UdSeg {
        remote_qpn: qpn,
        remote_qkey: qkey,
        av: device::abi::cmd::Av {
            dlid,
            port_num: 1,
            ..Default::default()
        },
    }
}

/// A UD destination that is a multicast group (AD-08): every QP attached
/// to `mgid` (QPN 0xFFFFFF), by MLID `mlid`, with the GRH a group needs.
pub fn mcast_dest(mgid: [u8; 16], mlid: u16, qkey: u32) -> UdSeg {
    UdSeg {
        remote_qpn: 0xff_ffff,
        remote_qkey: qkey,
        av: device::abi::cmd::Av {
            dgid: mgid,
            dlid: mlid,
            is_global: 1,
            hop_limit: 1,
            port_num: 1,
            ..Default::default()
        },
    }
}

/// A receive work request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvWr {
    pub wr_id: u64,
    pub sges: Vec<Sge>,
}

impl RecvWr {
    pub fn new(wr_id: u64, sges: Vec<Sge>) -> RecvWr {
        RecvWr { wr_id, sges }
    }
}

/// Why the driver refused to post.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostError {
    /// The ring has no free entry.
    Full,
    /// The WQE does not fit the stride (or the SGE count the QP was made for).
    TooBig,
    /// A UD QP needs a destination.
    NoDestination,
    /// No such object.
    Unknown,
    /// The doorbell store or WAKE failed (the device is gone).
    Vfio,
}

impl std::fmt::Display for PostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self:?}")
    }
}

impl std::error::Error for PostError {}

/// Whether a send opcode carries a remote address segment.
fn has_raddr(op: WrOpcode) -> bool {
    matches!(
        op,
        WrOpcode::RdmaWrite
            | WrOpcode::RdmaWriteWithImm
            | WrOpcode::RdmaRead
            | WrOpcode::AtomicCmpSwap
            | WrOpcode::AtomicFetchAdd
            | WrOpcode::Flush
            | WrOpcode::AtomicWrite
    )
}

/// Opcodes whose WQE carries a `vhca_atomic_seg` after the remote address.
fn is_atomic(op: WrOpcode) -> bool {
    matches!(
        op,
        WrOpcode::AtomicCmpSwap
            | WrOpcode::AtomicFetchAdd
            | WrOpcode::Flush
            | WrOpcode::AtomicWrite
    )
}

/// Encodes a send WQE for a QP of type `t` (abi::wqe WQE_LAYOUT).
pub fn encode_send(wr: &SendWr, t: QpType) -> Result<Vec<u8>, PostError> {
    let mut v = Vec::with_capacity(128);
    let mut flags = wr.flags;
    let len = match &wr.inline {
        Some(d) => {
            flags |= send_flags::INLINE;
            d.len()
        }
        None => {
            flags &= !send_flags::INLINE;
            wr.sges.len()
        }
    };
    let ctrl = SendCtrl {
        wr_id: wr.wr_id,
        opcode: wr.opcode.raw(),
        flags,
        len: u16::try_from(len).map_err(|_| PostError::TooBig)?,
        imm_or_inv: wr.imm,
    };
    v.extend_from_slice(&ctrl.to_bytes());
    if matches!(t, QpType::Ud | QpType::Gsi | QpType::Smi) {
        v.extend_from_slice(&wr.ud.ok_or(PostError::NoDestination)?.to_bytes());
    }
    if t == QpType::XrcIni {
        let seg = XrcSeg {
            remote_srqn: wr.xrc_srqn.ok_or(PostError::NoDestination)?,
            rsvd: [0; 12],
        };
        v.extend_from_slice(&seg.to_bytes());
    }
    if t == QpType::Rd {
        v.extend_from_slice(&wr.rd.ok_or(PostError::NoDestination)?.to_bytes());
    }
    if has_raddr(wr.opcode) {
        let (addr, rkey) = wr.remote.unwrap_or((0, 0));
        v.extend_from_slice(
            &RaddrSeg {
                remote_addr: addr,
                rkey,
                rsvd: 0,
            }
            .to_bytes(),
        );
    }
    if is_atomic(wr.opcode) {
        let (compare_add, swap) = wr.atomic.unwrap_or((0, 0));
        v.extend_from_slice(&AtomicSeg { compare_add, swap }.to_bytes());
    }
    if wr.opcode == WrOpcode::BindMw {
        v.extend_from_slice(&wr.bind.unwrap_or_default().to_bytes());
    }
    if wr.opcode == WrOpcode::RegMr {
        v.extend_from_slice(&wr.reg.unwrap_or_default().to_bytes());
    }
    match &wr.inline {
        Some(d) => v.extend_from_slice(d),
        None => {
            for s in &wr.sges {
                v.extend_from_slice(&s.to_bytes());
            }
        }
    }
    Ok(v)
}

/// Encodes a receive WQE.
pub fn encode_recv(wr: &RecvWr) -> Vec<u8> {
    let mut v = Vec::with_capacity(16 + 16 * wr.sges.len());
    v.extend_from_slice(
        &RecvCtrl {
            wr_id: wr.wr_id,
            num_sge: wr.sges.len() as u32,
            rsvd: 0,
        }
        .to_bytes(),
    );
    for s in &wr.sges {
        v.extend_from_slice(&s.to_bytes());
    }
    v
}

/// Whether a CQE is for a receive WQE.
pub fn is_recv(c: &Cqe) -> bool {
    c.opcode & 0x80 != 0
}

/// The status of a CQE as the enum, if known.
pub fn wc_status(c: &Cqe) -> Option<WcStatus> {
    WcStatus::from_raw(c.status)
}

/// The opcode of a CQE as the enum, if known.
pub fn wc_opcode(c: &Cqe) -> Option<WcOpcode> {
    WcOpcode::from_raw(c.opcode)
}

/// Word offsets in a slot.
const WORD0: u64 = 0;
const WORD1: u64 = 4;

impl Hca {
    // ------------------------------------------------------------ doorbells

    /// Stores a producer index into word `word` (0 or 4) of the slot at
    /// `slot_off`, sets the slot's bit in its page's doorbell summary (after
    /// the index: the device reads the slot after taking the bit), then the
    /// wake protocol: full fence, load the page's `asleep`, and write BAR0
    /// WAKE if it is set (abi::uar DOORBELL_PROTOCOL).
    pub fn ring_producer(
        &mut self,
        slot_off: u64,
        word: u64,
        value: u32,
    ) -> Result<(), guest::Error> {
        self.g.bar2_store32(slot_off + word, value)?;
        self.set_summary_bit(slot_off)?;
        fence(Ordering::SeqCst);
        let page = slot_off - slot_off % u64::from(uar::PAGE_SIZE);
        let asleep = self.g.bar2_load32(page)?;
        if asleep != uar::AWAKE && self.wake_enabled {
            // Posted, as QEMU posts a guest's MMIO store: the driver does
            // not wait for the device's vfio-user thread to answer (it is
            // often preempted by the data path it just woke).
            self.g.bar0_write32_posted(reg::WAKE, 1)?;
            self.wakes += 1;
        }
        Ok(())
    }

    /// Sets the summary bit of the slot at `slot_off` (an atomic OR), alone: a
    /// raw test may flag a slot whose index did not move, or store an index
    /// without its bit (`store_bar2`) to show the device does not see it.
    pub fn set_summary_bit(&mut self, slot_off: u64) -> Result<(), guest::Error> {
        let page_size = u64::from(uar::PAGE_SIZE);
        let page = slot_off - slot_off % page_size;
        let slot = (slot_off % page_size) / u64::from(uar::SLOT_SIZE);
        let at = page + u64::from(uar::SUMMARY_OFFSET) + slot / 32 * 4;
        self.g.bar2_or32(at, 1 << (slot % 32))
    }

    /// Turns off the WAKE half of the protocol (to show the device is then
    /// left asleep; a test of the protocol itself).
    pub fn set_wake_enabled(&mut self, on: bool) {
        self.wake_enabled = on;
    }

    /// Stores any value into any 32-bit word of BAR2 (raw).
    pub fn store_bar2(&mut self, off: u64, value: u32) -> Result<(), guest::Error> {
        self.g.bar2_store32(off, value)
    }

    // ------------------------------------------------------------ posting

    /// Posts one send WR.
    pub fn post_send(&mut self, qp: QpH, wr: &SendWr) -> Result<(), PostError> {
        self.post_send_batch(qp, std::slice::from_ref(wr))
    }

    /// Posts send WRs and rings the doorbell once.
    pub fn post_send_batch(&mut self, qp: QpH, wrs: &[SendWr]) -> Result<(), PostError> {
        let (slot, pi) = {
            let q = self.qps.get(&qp.qpn).ok_or(PostError::Unknown)?;
            let usable = q.sq.entries().min(q.cap.max_send_wr.max(1));
            if q.sq_outstanding.len() + wrs.len() > usable as usize {
                return Err(PostError::Full);
            }
            let mut wqes = Vec::with_capacity(wrs.len());
            for wr in wrs {
                let b = encode_send(wr, q.qp_type)?;
                if b.len() > q.sq.stride()
                    || (wr.inline.is_none() && wr.sges.len() as u32 > q.cap.max_send_sge)
                    || wr
                        .inline
                        .as_ref()
                        .is_some_and(|d| d.len() as u32 > q.cap.max_inline_data)
                {
                    return Err(PostError::TooBig);
                }
                wqes.push(b);
            }
            let mut pi = q.sq_pi;
            for b in &wqes {
                let a = q.sq.addr(pi);
                self.g.write(a, b);
                self.g.fill(a + b.len() as u64, q.sq.stride() - b.len(), 0);
                pi = pi.wrapping_add(1);
            }
            (q.slot, pi)
        };
        let q = self.qps.get_mut(&qp.qpn).expect("checked");
        q.sq_pi = pi;
        q.sq_outstanding.extend(wrs.iter().map(|w| w.wr_id));
        fence(Ordering::Release);
        self.ring_producer(slot.offset(), WORD0, pi)
            .map_err(|_| PostError::Vfio)
    }

    /// Posts one receive WR on a QP's RQ.
    pub fn post_recv(&mut self, qp: QpH, wr: &RecvWr) -> Result<(), PostError> {
        self.post_recv_batch(qp, std::slice::from_ref(wr))
    }

    /// Posts receive WRs and rings the doorbell once.
    pub fn post_recv_batch(&mut self, qp: QpH, wrs: &[RecvWr]) -> Result<(), PostError> {
        let (slot, pi) = {
            let q = self.qps.get(&qp.qpn).ok_or(PostError::Unknown)?;
            let rq = q.rq.as_ref().ok_or(PostError::Unknown)?;
            let usable = rq.entries().min(q.cap.max_recv_wr.max(1));
            if q.rq_outstanding + wrs.len() as u32 > usable {
                return Err(PostError::Full);
            }
            let mut pi = q.rq_pi;
            for wr in wrs {
                let b = encode_recv(wr);
                if b.len() > rq.stride() || wr.sges.len() as u32 > q.cap.max_recv_sge {
                    return Err(PostError::TooBig);
                }
                let a = rq.addr(pi);
                self.g.write(a, &b);
                self.g.fill(a + b.len() as u64, rq.stride() - b.len(), 0);
                pi = pi.wrapping_add(1);
            }
            (q.slot, pi)
        };
        let q = self.qps.get_mut(&qp.qpn).expect("checked");
        q.rq_pi = pi;
        q.rq_outstanding += wrs.len() as u32;
        fence(Ordering::Release);
        self.ring_producer(slot.offset(), WORD1, pi)
            .map_err(|_| PostError::Vfio)
    }

    /// Posts receive WRs on an SRQ and rings its doorbell once.
    pub fn post_srq_recv(&mut self, srq: SrqH, wrs: &[RecvWr]) -> Result<(), PostError> {
        let (slot, pi) = {
            let s = self.srqs.get(&srq.srqn).ok_or(PostError::Unknown)?;
            let usable = s.ring.entries().min(s.max_wr.max(1));
            if s.outstanding + wrs.len() as u32 > usable {
                return Err(PostError::Full);
            }
            let mut pi = s.pi;
            for wr in wrs {
                let b = encode_recv(wr);
                if b.len() > s.ring.stride() || wr.sges.len() as u32 > s.max_sge {
                    return Err(PostError::TooBig);
                }
                let a = s.ring.addr(pi);
                self.g.write(a, &b);
                self.g
                    .fill(a + b.len() as u64, s.ring.stride() - b.len(), 0);
                pi = pi.wrapping_add(1);
            }
            (s.slot, pi)
        };
        let s = self.srqs.get_mut(&srq.srqn).expect("checked");
        s.pi = pi;
        s.outstanding += wrs.len() as u32;
        fence(Ordering::Release);
        self.ring_producer(slot.offset(), WORD0, pi)
            .map_err(|_| PostError::Vfio)
    }

    /// Send WQEs posted and not yet completed.
    pub fn sq_outstanding(&self, qp: QpH) -> usize {
        self.qps.get(&qp.qpn).map_or(0, |q| q.sq_outstanding.len())
    }

    /// Receive WQEs posted on the QP's RQ and not yet completed.
    pub fn rq_outstanding(&self, qp: QpH) -> u32 {
        self.qps.get(&qp.qpn).map_or(0, |q| q.rq_outstanding)
    }

    /// WQEs posted on the SRQ and not yet completed.
    pub fn srq_outstanding(&self, srq: SrqH) -> u32 {
        self.srqs.get(&srq.srqn).map_or(0, |s| s.outstanding)
    }

    // ------------------------------------------------------------ raw rings

    /// (entries, stride, producer index) of a QP's SQ.
    pub fn sq_geometry(&self, qp: QpH) -> (u32, usize, u32) {
        let q = &self.qps[&qp.qpn];
        (q.sq.entries(), q.sq.stride(), q.sq_pi)
    }

    /// (entries, stride, producer index) of a QP's RQ.
    pub fn rq_geometry(&self, qp: QpH) -> Option<(u32, usize, u32)> {
        let q = &self.qps[&qp.qpn];
        q.rq.as_ref().map(|r| (r.entries(), r.stride(), q.rq_pi))
    }

    /// Writes raw bytes (clipped to the stride, rest zeroed) as SQ entry `index`.
    pub fn write_sq_raw(&mut self, qp: QpH, index: u32, bytes: &[u8]) {
        let q = &self.qps[&qp.qpn];
        let n = bytes.len().min(q.sq.stride());
        let a = q.sq.addr(index);
        self.g.write(a, &bytes[..n]);
        self.g.fill(a + n as u64, q.sq.stride() - n, 0);
    }

    /// Writes raw bytes as RQ entry `index`.
    pub fn write_rq_raw(&mut self, qp: QpH, index: u32, bytes: &[u8]) {
        let q = &self.qps[&qp.qpn];
        let rq = q.rq.as_ref().expect("QP has an RQ");
        let n = bytes.len().min(rq.stride());
        let a = rq.addr(index);
        self.g.write(a, &bytes[..n]);
        self.g.fill(a + n as u64, rq.stride() - n, 0);
    }

    /// Writes raw bytes as SRQ entry `index`.
    pub fn write_srq_raw(&mut self, srq: SrqH, index: u32, bytes: &[u8]) {
        let s = &self.srqs[&srq.srqn];
        let n = bytes.len().min(s.ring.stride());
        let a = s.ring.addr(index);
        self.g.write(a, &bytes[..n]);
        self.g.fill(a + n as u64, s.ring.stride() - n, 0);
    }

    /// Stores any SQ producer index (with the wake protocol); the driver takes
    /// it as its own producer index and forgets what it had outstanding.
    pub fn ring_sq_raw(&mut self, qp: QpH, pi: u32) -> Result<(), guest::Error> {
        let q = self.qps.get_mut(&qp.qpn).expect("known QP");
        q.sq_pi = pi;
        q.sq_outstanding.clear();
        let off = q.slot.offset();
        fence(Ordering::Release);
        self.ring_producer(off, WORD0, pi)
    }

    /// Stores any RQ producer index.
    pub fn ring_rq_raw(&mut self, qp: QpH, pi: u32) -> Result<(), guest::Error> {
        let q = self.qps.get_mut(&qp.qpn).expect("known QP");
        q.rq_pi = pi;
        q.rq_outstanding = 0;
        let off = q.slot.offset();
        fence(Ordering::Release);
        self.ring_producer(off, WORD1, pi)
    }

    /// Stores any SRQ producer index.
    pub fn ring_srq_raw(&mut self, srq: SrqH, pi: u32) -> Result<(), guest::Error> {
        let s = self.srqs.get_mut(&srq.srqn).expect("known SRQ");
        s.pi = pi;
        s.outstanding = 0;
        let off = s.slot.offset();
        fence(Ordering::Release);
        self.ring_producer(off, WORD0, pi)
    }

    // ------------------------------------------------------------ completions

    /// Takes up to `max` CQEs (owner convention), stores the new consumer index
    /// into the CQ's slot, and retires the WQEs they complete.
    pub fn poll_cq(&mut self, cq: CqH, max: usize) -> Vec<Cqe> {
        let mut out = Vec::new();
        let Some(c) = self.cqs.get_mut(&cq.cqn) else {
            return out;
        };
        let start = c.ci;
        while out.len() < max {
            let a = c.ring.addr(c.ci);
            let owner = self
                .g
                .ram_u8(a + entry_const::CQE_SIZE as u64 - 1)
                .load(Ordering::Acquire);
            if owner & entry_const::OWNER_BIT as u8 != owner_bit(c.ci, c.ring.log2) {
                break;
            }
            fence(Ordering::Acquire);
            let mut b = [0u8; Cqe::SIZE];
            self.g.read(a, &mut b);
            out.push(Cqe::from_bytes(&b));
            c.ci = c.ci.wrapping_add(1);
        }
        if c.ci != start {
            let (off, ci) = (c.slot.offset(), c.ci);
            let _ = self.g.bar2_store32(off, ci);
        }
        for e in &out {
            self.retire(e);
        }
        if !out.is_empty() {
            self.service();
        }
        out
    }

    fn retire(&mut self, e: &Cqe) {
        if e.srqn != 0 && is_recv(e) {
            // SR-02: a receive of an XRC SRQ; its QP is an XRC TGT QP.
            if let Some(s) = self.srqs.get_mut(&e.srqn) {
                s.outstanding = s.outstanding.saturating_sub(1);
            }
            return;
        }
        let Some(q) = self.qps.get_mut(&e.qp_num) else {
            return;
        };
        if is_recv(e) {
            match q.srqn {
                Some(s) => {
                    if let Some(s) = self.srqs.get_mut(&s) {
                        s.outstanding = s.outstanding.saturating_sub(1);
                    }
                }
                None => q.rq_outstanding = q.rq_outstanding.saturating_sub(1),
            }
        } else if let Some(pos) = q.sq_outstanding.iter().position(|&w| w == e.wr_id) {
            // Completions come in order: earlier unsignaled WQEs are done too.
            q.sq_outstanding.drain(..=pos);
        }
    }

    /// Polls until `n` CQEs arrived or `timeout` passed; returns what came.
    pub fn wait_cqes(&mut self, cq: CqH, n: usize, timeout: Duration) -> Vec<Cqe> {
        let deadline = Instant::now() + timeout;
        let mut out = Vec::new();
        let mut idle = 0u32;
        while out.len() < n {
            let got = self.poll_cq(cq, n - out.len());
            if got.is_empty() {
                if Instant::now() > deadline {
                    break;
                }
                idle += 1;
                if idle < 100 {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(Duration::from_micros(50));
                }
            } else {
                idle = 0;
                out.extend(got);
            }
        }
        out
    }

    /// Arms a CQ: the next completion (or the next solicited one) raises a
    /// COMPLETION EQE on its EQ (abi::uar: a changed arm word, announced by
    /// the slot's summary bit, is one request).
    pub fn arm_cq(&mut self, cq: CqH, solicited: bool) -> Result<(), guest::Error> {
        let c = self.cqs.get_mut(&cq.cqn).expect("known CQ");
        c.arm_sn = c.arm_sn.wrapping_add(1) & cq_arm::SN_MASK;
        let word = c.arm_sn | if solicited { cq_arm::SOLICITED } else { 0 };
        let slot = c.slot.offset();
        self.g.bar2_store32(slot + WORD1, word)?;
        // The device reads the arm word when it takes the slot's summary bit
        // (abi::uar DOORBELL_PROTOCOL "Arming").
        self.set_summary_bit(slot)
    }

    /// The EQ a CQ reports to.
    pub fn cq_eqn(&self, cq: CqH) -> u32 {
        self.cqs[&cq.cqn].eqn
    }

    // ------------------------------------------------------------ events

    /// Takes the EQEs of EQ `eqn` (0: the async EQ) without waiting; stores the
    /// consumer index and, if any were taken, a new arm word.
    pub fn drain_eq(&mut self, eqn: u32) -> Vec<Eqe> {
        let g = &self.g;
        let st = if eqn == 0 {
            &mut self.eq0
        } else {
            match self.eqs.get_mut(&eqn) {
                Some(s) => s,
                None => return Vec::new(),
            }
        };
        let mut out = Vec::new();
        loop {
            let a = st.ring.addr(st.ci);
            let owner = g
                .ram_u8(a + entry_const::EQE_SIZE as u64 - 1)
                .load(Ordering::Acquire);
            if owner & entry_const::OWNER_BIT as u8 != owner_bit(st.ci, st.ring.log2) {
                break;
            }
            fence(Ordering::Acquire);
            let mut b = [0u8; Eqe::SIZE];
            g.read(a, &mut b);
            out.push(Eqe::from_bytes(&b));
            st.ci = st.ci.wrapping_add(1);
            if out.len() as u32 >= st.ring.entries() {
                break;
            }
        }
        if !out.is_empty() {
            let (off, ci) = (st.slot.offset(), st.ci);
            st.arm = st.arm.wrapping_add(1);
            let arm = st.arm;
            // Consume, store ci, then a new arm word (abi::uar).
            let _ = self.g.bar2_store32(off, ci);
            fence(Ordering::SeqCst);
            let _ = self.g.bar2_store32(off + WORD1, arm);
        }
        out
    }

    /// Takes EQ 0's EQEs into the async event list (COMMAND_DONE apart). Called
    /// by every command and poll, so EQ 0 never overflows (a FATAL stop).
    pub fn service(&mut self) {
        let evs = self.drain_eq(0);
        if evs.is_empty() {
            return;
        }
        self.g.take_vector(self.eq0.vector);
        for e in evs {
            if e.kind == EqeType::CommandDone.raw() {
                self.cmd_done.push_back(e);
                while self.cmd_done.len() > 4096 {
                    self.cmd_done.pop_front();
                }
            } else {
                if self.events.len() >= self.cfg.max_kept_events {
                    self.events.pop_front();
                    self.events_dropped += 1;
                }
                self.events.push_back(e);
            }
        }
    }

    /// The asynchronous events received so far (taken).
    pub fn take_events(&mut self) -> Vec<Eqe> {
        self.service();
        self.events.drain(..).collect()
    }

    /// Waits up to `timeout` for an async event matching `pred` (others are kept).
    pub fn wait_async_event(
        &mut self,
        timeout: Duration,
        pred: impl Fn(&Eqe) -> bool,
    ) -> Option<Eqe> {
        let deadline = Instant::now() + timeout;
        loop {
            self.service();
            if let Some(pos) = self.events.iter().position(&pred) {
                return self.events.remove(pos);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            self.g
                .wait_vector(self.eq0.vector, left.min(Duration::from_millis(20)));
        }
    }

    /// Waits on a completion EQ's MSI-X vector, then takes its EQEs (and re-arms
    /// it). Returns at once if EQEs are already there; empty after `timeout`.
    pub fn wait_event(&mut self, eq: EqH, timeout: Duration) -> Vec<Eqe> {
        let deadline = Instant::now() + timeout;
        loop {
            let evs = self.drain_eq(eq.eqn);
            if !evs.is_empty() {
                self.g.take_vector(eq.vector);
                return evs;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Vec::new();
            }
            self.service();
            self.g
                .wait_vector(eq.vector, left.min(Duration::from_millis(50)));
        }
    }

    /// Whether the EQ's vector fired (interrupt only, EQEs untouched).
    pub fn take_vector(&self, eq: EqH) -> u64 {
        self.g.take_vector(eq.vector)
    }

    /// The EQ's consumer index.
    pub fn eq_ci(&self, eqn: u32) -> u32 {
        if eqn == 0 {
            self.eq0.ci
        } else {
            self.eqs.get(&eqn).map_or(0, |e| e.ci)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sge(i: u64) -> Sge {
        Sge {
            addr: 0x1000 * i,
            length: 10 + i as u32,
            lkey: 0x100 + i as u32,
        }
    }

    #[test]
    fn send_wqes_follow_the_layout() {
        // RC SEND: ctrl, then SGEs.
        let w = SendWr::send(7).sge(sge(1)).sge(sge(2));
        let b = encode_send(&w, QpType::Rc).unwrap();
        assert_eq!(b.len(), 16 + 2 * 16);
        let c = SendCtrl::from_prefix(&b).unwrap();
        assert_eq!((c.wr_id, c.opcode, c.len), (7, WrOpcode::Send.raw(), 2));
        assert_eq!(c.flags, send_flags::SIGNALED);
        assert_eq!(Sge::from_prefix(&b[32..]).unwrap(), sge(2));
        // WRITE with immediate: ctrl, raddr, SGE.
        let w = SendWr::write_imm(8, 0xdead_0000, 0x77, 0x1234_5678).sge(sge(3));
        let b = encode_send(&w, QpType::Uc).unwrap();
        assert_eq!(b.len(), 48);
        assert_eq!(SendCtrl::from_prefix(&b).unwrap().imm_or_inv, 0x1234_5678);
        let r = RaddrSeg::from_prefix(&b[16..]).unwrap();
        assert_eq!((r.remote_addr, r.rkey), (0xdead_0000, 0x77));
        // CmpSwap: ctrl, raddr, atomic, SGE.
        let w = SendWr::cmp_swap(9, 0x40, 5, 11, 22).sge(sge(4));
        let b = encode_send(&w, QpType::Rc).unwrap();
        assert_eq!(b.len(), 64);
        let a = AtomicSeg::from_prefix(&b[32..]).unwrap();
        assert_eq!((a.compare_add, a.swap), (11, 22));
        // FetchAdd puts the addend in compare_add.
        let b = encode_send(&SendWr::fetch_add(1, 0, 0, 3), QpType::Rc).unwrap();
        assert_eq!(AtomicSeg::from_prefix(&b[32..]).unwrap().compare_add, 3);
        // UD: ctrl, UD segment, inline data; INLINE set and len = bytes.
        let w = SendWr::send(10)
            .inline(b"hello")
            .ud(ud_dest(0x12, 0x99, 0x1111));
        let b = encode_send(&w, QpType::Ud).unwrap();
        assert_eq!(b.len(), 16 + 48 + 5);
        let c = SendCtrl::from_prefix(&b).unwrap();
        assert_eq!(c.flags & send_flags::INLINE, send_flags::INLINE);
        assert_eq!(c.len, 5);
        let u = UdSeg::from_prefix(&b[16..]).unwrap();
        assert_eq!(
            (u.remote_qpn, u.remote_qkey, u.av.dlid),
            (0x99, 0x1111, 0x12)
        );
        assert_eq!(&b[64..], b"hello");
        // A UD QP needs a destination.
        assert_eq!(
            encode_send(&SendWr::send(1), QpType::Ud),
            Err(PostError::NoDestination)
        );
    }

    #[test]
    fn receive_wqes_follow_the_layout() {
        let b = encode_recv(&RecvWr::new(5, vec![sge(1), sge(2), sge(3)]));
        assert_eq!(b.len(), 16 + 3 * 16);
        let c = RecvCtrl::from_prefix(&b).unwrap();
        assert_eq!((c.wr_id, c.num_sge), (5, 3));
        assert_eq!(Sge::from_prefix(&b[16..]).unwrap(), sge(1));
    }
}
