//! Send and receive WQE decoding (ARCHITECTURE.md §9): the bytes a guest
//! wrote in a work queue become the engine's work requests here, every field
//! checked; a WQE that does not decode gets a [`BadWqe`] reason, which the
//! data path reports as the vendor_err of an error CQE.

use transport::verbs::{
    Access, FastReg, MwBind, RdDest, RecvWr, SendData, SendFlags, SendWr, Sge, UdDest, WrOpcode,
};

use crate::abi;
use crate::abi::layout::Field;
use crate::convert::av_from_abi;

/// Why a send WQE was refused (the vendor_err of its error CQE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadWqe {
    Opcode = 1,
    ServiceOpcode = 2,
    TooManySges = 3,
    InlineTooLong = 4,
    Overflow = 5,
    Flags = 6,
    /// A LOCAL_INV or BIND_MW WQE with data segments, inline data or a nonzero
    /// reserved field of its BindSeg (MP-06, MP-07).
    LocalOp = 7,
    /// A REG_MR WQE (MP-08) with data, inline data, a nonzero reserved field,
    /// no pages or more than the device's fast-registration page list, a page
    /// shift out of range or a page list that is not 8-byte aligned.
    RegMr = 8,
    /// An XRC_INI WQE whose XRC segment has a reserved field set or an SRQ
    /// number past 24 bits (SR-02).
    Xrc = 9,
    /// An RD WQE whose RD segment has a reserved field set or an EECN or QPN
    /// past 24 bits (AD-11).
    Rd = 10,
}

fn seg<T: Field>(wqe: &[u8], at: &mut usize) -> Result<T, BadWqe> {
    let end = at.checked_add(T::SIZE).ok_or(BadWqe::Overflow)?;
    let bytes = wqe.get(*at..end).ok_or(BadWqe::Overflow)?;
    *at = end;
    Ok(T::get(bytes))
}

/// The rest of a REG_MR WQE after its control segment (MP-08; abi::wqe
/// RegMrSeg): every field checked that can be without the MR; the engine checks
/// the MR, the rights and the page list itself when it runs the WQE.
fn decode_reg_mr(wqe: &[u8], at: &mut usize, ctrl: &abi::wqe::SendCtrl) -> Result<SendWr, BadWqe> {
    use abi::cmd::pbl_const::{MAX_PAGE_SHIFT, MIN_PAGE_SHIFT};
    if ctrl.len != 0 || ctrl.flags & abi::verbs::send_flags::INLINE != 0 {
        return Err(BadWqe::RegMr);
    }
    let r: abi::wqe::RegMrSeg = seg(wqe, at)?;
    let pages_ok = (1..=transport::mr::MAX_FAST_REG_PAGES).contains(&r.npages);
    let shift_ok = (MIN_PAGE_SHIFT..=MAX_PAGE_SHIFT).contains(&r.page_shift);
    if r.rsvd != 0 || !pages_ok || !shift_ok || !r.page_list.is_multiple_of(8) {
        return Err(BadWqe::RegMr);
    }
    Ok(SendWr {
        wr_id: ctrl.wr_id,
        opcode: WrOpcode::RegMr,
        flags: SendFlags(u32::from(ctrl.flags)),
        data: SendData::Reg(FastReg {
            key: ctrl.imm_or_inv,
            access: Access(r.access),
            iova: r.iova,
            length: r.length,
            page_shift: r.page_shift as u8,
            page_list: r.page_list,
            npages: r.npages,
        }),
        imm_or_inv: ctrl.imm_or_inv,
        remote_addr: 0,
        rkey: 0,
        compare: 0,
        swap_add: 0,
        ud: None,
    })
}

/// A send WQE whose control segment is followed by one service segment
/// (XRC's, RD's) and then what an RC WQE has after its control segment:
/// the segment and the WR decoded from the RC layout of the same WQE (at
/// most a stride, 4 KiB, copied on the stack).
fn decode_with_seg<T: Field>(
    wqe: &[u8],
    max_sge: u32,
    max_inline: u32,
) -> Result<(T, SendWr), (u64, BadWqe)> {
    let ctrl = abi::wqe::SendCtrl::SIZE;
    let mut at = ctrl;
    let x: T = seg(wqe, &mut at).map_err(|e| (0, e))?;
    let mut rc = [0u8; 1 << abi::wqe::wqe_const::MAX_WQE_SHIFT];
    let rest = &wqe[at..];
    let len = (ctrl + rest.len()).min(rc.len());
    rc[..ctrl].copy_from_slice(&wqe[..ctrl]);
    rc[ctrl..len].copy_from_slice(&rest[..len - ctrl]);
    let wr = decode_send(&rc[..len], abi::verbs::QpType::Rc, max_sge, max_inline)?;
    Ok((x, wr))
}

/// Decodes a send WQE of an XRC_INI QP (SR-02; abi::wqe WQE_LAYOUT): the
/// control segment, the XRC segment with the target's XRC SRQ (WF-06), then
/// what an RC WQE has after its control segment. Returns the WR and the SRQ
/// number. The operations XRC lacks (FLUSH, ATOMIC WRITE) the engine refuses.
pub fn decode_send_xrc(
    wqe: &[u8],
    max_sge: u32,
    max_inline: u32,
) -> Result<(SendWr, u32), (u64, BadWqe)> {
    let (x, wr): (abi::wqe::XrcSeg, _) = decode_with_seg(wqe, max_sge, max_inline)?;
    if x.rsvd != [0; 12] || x.remote_srqn > 0xff_ffff {
        return Err((wr.wr_id, BadWqe::Xrc));
    }
    Ok((wr, x.remote_srqn))
}

/// Decodes a send WQE of an RD QP (AD-11; abi::wqe WQE_LAYOUT): the control
/// segment, the RD segment (EE context, destination QP, Q_Key), then what an
/// RC WQE has after its control segment. RD takes SEND, RDMA WRITE (with
/// immediate), RDMA READ and the two ATOMICs.
pub fn decode_send_rd(
    wqe: &[u8],
    max_sge: u32,
    max_inline: u32,
) -> Result<(SendWr, RdDest), (u64, BadWqe)> {
    let (r, wr): (abi::wqe::RdSeg, _) = decode_with_seg(wqe, max_sge, max_inline)?;
    let ok_op = matches!(
        wr.opcode,
        WrOpcode::Send
            | WrOpcode::SendWithImm
            | WrOpcode::RdmaWrite
            | WrOpcode::RdmaWriteWithImm
            | WrOpcode::RdmaRead
            | WrOpcode::AtomicCmpSwap
            | WrOpcode::AtomicFetchAdd
    );
    if !ok_op {
        return Err((wr.wr_id, BadWqe::ServiceOpcode));
    }
    if r.rsvd != 0 || r.eecn > 0xff_ffff || r.remote_qpn > 0xff_ffff {
        return Err((wr.wr_id, BadWqe::Rd));
    }
    let dest = RdDest {
        eecn: r.eecn,
        remote_qpn: r.remote_qpn,
        remote_qkey: r.remote_qkey,
    };
    Ok((wr, dest))
}

/// Decodes a send WQE (abi::wqe WQE_LAYOUT) of a QP of type `t`.
pub fn decode_send(
    wqe: &[u8],
    t: abi::verbs::QpType,
    max_sge: u32,
    max_inline: u32,
) -> Result<SendWr, (u64, BadWqe)> {
    use abi::verbs::QpType as T;
    let mut at = 0;
    let ctrl: abi::wqe::SendCtrl = seg(wqe, &mut at).map_err(|e| (0, e))?;
    let id = ctrl.wr_id;
    let bad = |e| (id, e);
    let opcode = match ctrl.opcode {
        0 => WrOpcode::RdmaWrite,
        1 => WrOpcode::RdmaWriteWithImm,
        2 => WrOpcode::Send,
        3 => WrOpcode::SendWithImm,
        4 => WrOpcode::RdmaRead,
        5 => WrOpcode::AtomicCmpSwap,
        6 => WrOpcode::AtomicFetchAdd,
        7 => WrOpcode::LocalInv,
        8 => WrOpcode::BindMw,
        9 => WrOpcode::SendWithInv,
        14 => WrOpcode::Flush,
        15 => WrOpcode::AtomicWrite,
        32 => WrOpcode::RegMr,
        _ => return Err(bad(BadWqe::Opcode)),
    };
    let known = abi::verbs::send_flags::FENCE
        | abi::verbs::send_flags::SIGNALED
        | abi::verbs::send_flags::SOLICITED
        | abi::verbs::send_flags::INLINE;
    if ctrl.flags & !known != 0 {
        return Err(bad(BadWqe::Flags));
    }
    let ud_like = matches!(t, T::Ud | T::Gsi | T::Smi);
    let allowed = match opcode {
        WrOpcode::Send | WrOpcode::SendWithImm => true,
        WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => matches!(t, T::Rc | T::Uc),
        WrOpcode::RdmaRead
        | WrOpcode::AtomicCmpSwap
        | WrOpcode::AtomicFetchAdd
        | WrOpcode::SendWithInv
        | WrOpcode::Flush
        | WrOpcode::AtomicWrite => t == T::Rc,
        // MP-07, MP-08: LOCAL_INV and REG_MR on any service; MP-06/MP-07:
        // BIND_MW on RC and UC.
        WrOpcode::LocalInv | WrOpcode::RegMr => true,
        WrOpcode::BindMw => matches!(t, T::Rc | T::Uc),
    };
    if !allowed {
        return Err(bad(BadWqe::ServiceOpcode));
    }
    if opcode == WrOpcode::RegMr {
        return decode_reg_mr(wqe, &mut at, &ctrl).map_err(bad);
    }
    if matches!(opcode, WrOpcode::LocalInv | WrOpcode::BindMw) {
        // SendCtrl (imm_or_inv: the R_Key to invalidate, or the window's
        // current R_Key), then for BIND_MW one BindSeg; no data, no inline.
        if ctrl.len != 0 || ctrl.flags & abi::verbs::send_flags::INLINE != 0 {
            return Err(bad(BadWqe::LocalOp));
        }
        let data = if opcode == WrOpcode::BindMw {
            let b: abi::wqe::BindSeg = seg(wqe, &mut at).map_err(bad)?;
            if b.rsvd != 0 {
                return Err(bad(BadWqe::LocalOp));
            }
            SendData::Bind(MwBind {
                mw_rkey: ctrl.imm_or_inv,
                new_rkey: b.new_rkey,
                mr_lkey: b.mr_lkey,
                addr: b.addr,
                length: b.length,
                access: Access(b.access),
            })
        } else {
            SendData::Sges(Vec::new())
        };
        return Ok(SendWr {
            wr_id: id,
            opcode,
            flags: SendFlags(u32::from(ctrl.flags)),
            data,
            imm_or_inv: ctrl.imm_or_inv,
            remote_addr: 0,
            rkey: 0,
            compare: 0,
            swap_add: 0,
            ud: None,
        });
    }
    let ud = if ud_like {
        let u: abi::wqe::UdSeg = seg(wqe, &mut at).map_err(bad)?;
        Some(UdDest {
            av: av_from_abi(&u.av),
            remote_qpn: u.remote_qpn & 0xff_ffff,
            remote_qkey: u.remote_qkey,
            // AD-05, PV-03: a GSI WR names its P_Key's entry.
            pkey_index: (t == T::Gsi).then_some(u.av.pkey_index),
        })
    } else {
        None
    };
    let (mut remote_addr, mut rkey, mut compare, mut swap_add) = (0, 0, 0, 0);
    if matches!(
        opcode,
        WrOpcode::RdmaWrite
            | WrOpcode::RdmaWriteWithImm
            | WrOpcode::RdmaRead
            | WrOpcode::AtomicCmpSwap
            | WrOpcode::AtomicFetchAdd
            | WrOpcode::Flush
            | WrOpcode::AtomicWrite
    ) {
        let r: abi::wqe::RaddrSeg = seg(wqe, &mut at).map_err(bad)?;
        remote_addr = r.remote_addr;
        rkey = r.rkey;
    }
    if matches!(opcode, WrOpcode::AtomicCmpSwap | WrOpcode::AtomicFetchAdd) {
        let a: abi::wqe::AtomicSeg = seg(wqe, &mut at).map_err(bad)?;
        // ibverbs: compare_add is the compare value (CmpSwap) or the addend
        // (FetchAdd); the engine's `swap_add` is the swap value or the addend.
        if opcode == WrOpcode::AtomicCmpSwap {
            compare = a.compare_add;
            swap_add = a.swap;
        } else {
            swap_add = a.compare_add;
        }
    }
    if matches!(opcode, WrOpcode::Flush | WrOpcode::AtomicWrite) {
        // IBA 1.5 MPE: no data; AtomicSeg.compare_add is the FLUSH length or
        // the ATOMIC WRITE's 8 bytes (the engine's `compare` / `swap_add`).
        if ctrl.len != 0 || ctrl.flags & abi::verbs::send_flags::INLINE != 0 {
            return Err(bad(BadWqe::LocalOp));
        }
        let a: abi::wqe::AtomicSeg = seg(wqe, &mut at).map_err(bad)?;
        if opcode == WrOpcode::Flush {
            compare = a.compare_add;
        } else {
            swap_add = a.compare_add;
        }
    }
    let n = usize::from(ctrl.len);
    let inline = ctrl.flags & abi::verbs::send_flags::INLINE != 0;
    let data = if inline {
        if ctrl.len as u32 > max_inline {
            return Err(bad(BadWqe::InlineTooLong));
        }
        let bytes = wqe.get(at..at + n).ok_or(bad(BadWqe::Overflow))?;
        SendData::Inline(bytes.to_vec())
    } else {
        if ctrl.len as u32 > max_sge {
            return Err(bad(BadWqe::TooManySges));
        }
        let mut sges = Vec::with_capacity(n);
        for _ in 0..n {
            let s: abi::wqe::Sge = seg(wqe, &mut at).map_err(bad)?;
            sges.push(Sge {
                addr: s.addr,
                length: s.length,
                lkey: s.lkey,
            });
        }
        SendData::Sges(sges)
    };
    // The ABI's flag bits are ibverbs' (FENCE 1, SIGNALED 2, SOLICITED 4,
    // INLINE 8), as the engine's.
    Ok(SendWr {
        wr_id: id,
        opcode,
        flags: SendFlags(u32::from(ctrl.flags)),
        data,
        imm_or_inv: ctrl.imm_or_inv,
        remote_addr,
        rkey,
        compare,
        swap_add,
        ud,
    })
}

/// Decodes a receive WQE; `Err` carries its wr_id when it could be read.
pub fn decode_recv(wqe: &[u8], max_sge: u32) -> Result<RecvWr, (u64, BadWqe)> {
    let mut at = 0;
    let ctrl: abi::wqe::RecvCtrl = seg(wqe, &mut at).map_err(|e| (0, e))?;
    if ctrl.num_sge > max_sge {
        return Err((ctrl.wr_id, BadWqe::TooManySges));
    }
    let mut sges = Vec::with_capacity(ctrl.num_sge as usize);
    for _ in 0..ctrl.num_sge {
        let s: abi::wqe::Sge = seg(wqe, &mut at).map_err(|e| (ctrl.wr_id, e))?;
        sges.push(Sge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        });
    }
    Ok(RecvWr {
        wr_id: ctrl.wr_id,
        sges,
    })
}
