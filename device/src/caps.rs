//! The device's limits (ARCHITECTURE.md §1): one value read by the command
//! queue (which enforces it), by QUERY_DEVICE and by BAR0's `CAP_*` registers.
//! Its own module so that neither `hca` (which holds it) nor `cmdq` (which
//! enforces it) reaches into the other for it.

use transport::engine::Limits;

use crate::abi::bar0::dev_cap;

/// Device limits: what QUERY_DEVICE reports, what BAR0's CAP_* registers show
/// and what the command queue enforces. 32 bits each, as the registers are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// QPs, including QP 1 (GSI).
    pub max_qp: u32,
    pub max_cq: u32,
    pub max_srq: u32,
    pub max_mr: u32,
    pub max_pd: u32,
    /// EQs, including EQ 0.
    pub max_eq: u32,
    /// Work requests per SQ or RQ; rings hold at most this many WQEs.
    pub max_qp_wr: u32,
    pub max_sge: u32,
    pub max_cqe: u32,
    pub max_inline: u32,
    /// UAR pages of BAR2.
    pub num_uars: u32,
    /// MSI-X vectors (abi::ident MSIX_MIN_VECTORS..=MSIX_MAX_VECTORS).
    pub msix_vectors: u32,
    pub max_cmdq_log2: u32,
    pub max_eq_log2: u32,
    pub max_srq_wr: u32,
    /// RDMA READ / ATOMIC depth, as initiator and as responder.
    pub max_rd_atomic: u32,
    /// Most pages of a fast-registration MR (MP-08).
    pub max_fast_reg_pages: u32,
    /// Multicast groups, QPs per group and attachments in all (AD-08): the
    /// engine's bounds, which ATTACH_MCAST enforces.
    pub max_mcast_grp: u32,
    pub max_mcast_qp_attach: u32,
    pub max_total_mcast_qp_attach: u32,
    /// `VHCA_DEV_CAP_*`.
    pub flags: u32,
    /// On-demand paging MRs served (issue 29); off with `vhca --no-odp`.
    pub odp: bool,
}

impl Caps {
    /// The device's limits over an engine with `l`: the engine's own sizes, and
    /// the device's choices for what the engine does not know (EQs, UARs,
    /// vectors, the command queue).
    pub fn from_limits(l: &Limits) -> Caps {
        let n = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
        // Never promise more objects than the memory budget holds
        // (ARCHITECTURE.md §9): what ibv_devinfo shows is what can be had.
        let fit = |each: u64| u32::try_from(l.mem_budget / each.max(1)).unwrap_or(u32::MAX);
        use transport::budget::recv_wqe_bytes;
        use transport::engine::qp_bytes;
        use transport::mr::mr_bytes;
        Caps {
            max_qp: n(l.max_qp).min(fit(qp_bytes(l.max_rd_atomic))),
            max_cq: n(l.max_cq),
            max_srq: n(l.max_srq),
            max_mr: n(l.max_mr)
                .min(transport::mr::MAX_MR_INDEX)
                .min(fit(mr_bytes(0))),
            max_pd: n(l.max_pd),
            max_eq: 64,
            max_qp_wr: l.max_qp_wr.min(fit(recv_wqe_bytes(1))),
            max_sge: l.max_sge,
            max_cqe: l.max_cqe,
            max_inline: l.max_inline,
            // 256 KiB of BAR2: the kernel's page and 63 user contexts.
            num_uars: 64,
            msix_vectors: 16,
            // 1024 slots of 64 bytes: 64 KiB, a modest contiguous allocation.
            max_cmdq_log2: 10,
            // 64 Ki EQEs of 16 bytes: 1 MiB.
            max_eq_log2: 16,
            max_srq_wr: l.max_qp_wr,
            max_rd_atomic: u32::from(l.max_rd_atomic),
            max_fast_reg_pages: transport::mr::MAX_FAST_REG_PAGES,
            max_mcast_grp: n(l.max_mcast_grp),
            max_mcast_qp_attach: n(l.max_mcast_qp_attach),
            max_total_mcast_qp_attach: n(l.max_total_mcast_qp_attach),
            flags: dev_cap::RC
                | dev_cap::UC
                | dev_cap::UD
                | dev_cap::GSI
                | dev_cap::SRQ
                | dev_cap::ATOMIC
                | dev_cap::SEND_WITH_INV
                | dev_cap::MW_TYPE1
                | dev_cap::MW_TYPE2
                | dev_cap::DMA_MR
                | dev_cap::RESIZE_CQ
                | dev_cap::RESIZE_SRQ
                | dev_cap::FLUSH_GLOBAL
                | dev_cap::ATOMIC_WRITE
                | dev_cap::FAST_REG_MR
                | dev_cap::MW_TYPE2A
                | dev_cap::XRC
                | dev_cap::APM,
            odp: true,
        }
    }

    /// QUERY_DEVICE's `odp_caps` (issue 29): what the engine's ODP tests
    /// prove (transport/tests/engine_odp.rs: RC requester and responder
    /// SEND/RECV/WRITE/READ/ATOMIC and an SRQ receive, a UD SEND's gather, an
    /// XRC SEND from and into ODP MRs, an implicit MR), 0 with ODP off. UC
    /// none; a UD receive into a page not present completes in error, so UD
    /// RECV is not advertised.
    pub fn odp_caps(&self) -> u32 {
        use crate::abi::cmd::{odp_cap, odp_transport as t};
        if !self.odp {
            return 0;
        }
        let rc = t::SEND | t::RECV | t::WRITE | t::READ | t::ATOMIC | t::SRQ_RECV;
        let ud = t::SEND;
        let xrc = t::SEND | t::SRQ_RECV;
        odp_cap::SUPPORT
            | odp_cap::IMPLICIT
            | rc << odp_cap::RC_SHIFT
            | ud << odp_cap::UD_SHIFT
            | xrc << odp_cap::XRC_SHIFT
    }
}

impl Default for Caps {
    /// The limits of an engine with `Limits::default()`.
    fn default() -> Caps {
        Caps::from_limits(&Limits::default())
    }
}
