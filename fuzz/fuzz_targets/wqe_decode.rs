//! Device WQE decoding (device/src/datapath.rs `decode_send`, `decode_recv`; abi::wqe
//! WQE_LAYOUT): any bytes a guest leaves in a ring slot decode to a work request
//! within the QP's limits or to a `BadWqe` (an error CQE, QS-06), and a decoded
//! request posted to an engine QP in RTS of that service moves packets without a
//! panic.
#![no_main]

use device::abi::verbs::QpType as AbiQpType;
use device::datapath::{decode_recv, decode_send, decode_send_rd, decode_send_xrc};
use libfuzzer_sys::fuzz_target;
use transport::verbs::{QpState, QpType, SendData};
use vhca_fuzz::bench::Bench;

/// The largest WQE stride (abi MAX_WQE_SHIFT).
const MAX_WQE: usize = 4096;

fn rts_qp(b: &Bench, t: QpType) -> u32 {
    b.qps
        .iter()
        .map(|&(q, qt)| (q, qt))
        .find(|&(q, qt)| qt == t && b.e.query_qp(q).is_ok_and(|s| s.0 == QpState::Rts))
        .expect("the bench has an RTS QP of every type")
        .0
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, wqe)) = data.split_first() else {
        return;
    };
    let wqe = &wqe[..wqe.len().min(MAX_WQE)];
    let abi_t = [
        AbiQpType::Rc,
        AbiQpType::Uc,
        AbiQpType::Ud,
        AbiQpType::Gsi,
        AbiQpType::Smi,
    ][usize::from(sel % 5)];
    let max_sge = [1, 2, 16, 32][usize::from(sel >> 3 & 3)];
    let max_inline = [0, 64, 256, 4096][usize::from(sel >> 5 & 3)];
    let send = decode_send(wqe, abi_t, max_sge, max_inline);
    let recv = decode_recv(wqe, max_sge);
    if let Ok(wr) = &send {
        match &wr.data {
            SendData::Sges(s) => assert!(s.len() <= max_sge as usize),
            SendData::Inline(d) => assert!(d.len() <= max_inline as usize),
            SendData::Bind(_) => {}
            // MP-08: a REG_MR decodes only with a page count the device allows.
            SendData::Reg(r) => {
                assert!((1..=transport::mr::MAX_FAST_REG_PAGES).contains(&r.npages))
            }
        }
    }
    if let Ok(wr) = &recv {
        assert!(wr.sges.len() <= max_sge as usize);
    }
    // SR-02: the same bytes as an XRC_INI WQE (an XRC segment after the control).
    if let Ok((wr, srqn)) = decode_send_xrc(wqe, max_sge, max_inline) {
        assert!(srqn <= 0xff_ffff);
        if let SendData::Sges(s) = &wr.data {
            assert!(s.len() <= max_sge as usize);
        }
    }
    // AD-11: the same bytes as an RD WQE (an RD segment after the control).
    if let Ok((wr, d)) = decode_send_rd(wqe, max_sge, max_inline) {
        assert!(d.eecn <= 0xff_ffff && d.remote_qpn <= 0xff_ffff);
        if let SendData::Sges(s) = &wr.data {
            assert!(s.len() <= max_sge as usize);
        }
    }
    // Post what decoded into a live engine (the bench's SGEs name its MR window
    // only by chance; anything else must complete in error, not panic).
    if sel & 0x80 == 0 || (send.is_err() && recv.is_err()) {
        return;
    }
    let t = match abi_t {
        AbiQpType::Rc => QpType::Rc,
        AbiQpType::Uc => QpType::Uc,
        _ => QpType::Ud,
    };
    let mut b = Bench::new(false);
    let q = rts_qp(&b, t);
    if let Ok(wr) = send {
        let _ = b.e.post_send(q, wr);
    }
    if let Ok(wr) = recv {
        let _ = b.e.post_recv(q, wr);
    }
    b.transmit(32);
    b.now = b.now.plus_ns(1_000_000_000);
    b.e.handle_timeout(b.now);
    b.transmit(32);
});
