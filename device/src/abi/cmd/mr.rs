//! Parameters of the memory commands: protection domains, memory regions and
//! memory windows.

use super::Pbl;

abi_struct! {
    /// ALLOC_PD output.
    pub struct AllocPdOut (4) {
        pub pdn: u32,
    }
}

abi_struct! {
    /// DEALLOC_PD input.
    pub struct DeallocPdIn (4) {
        pub pdn: u32,
    }
}

abi_consts! {
    /// REG_MR `flags`.
    pub mod reg_mr_flags: u32 = "VHCA_REG_MR_F" {
        /// An identity MR over all guest memory for kernel verbs (get_dma_mr):
        /// iova 0, length 2^64 - 1 (`u64::MAX`), `pbl` ignored; the device builds
        /// the translation from its guest memory map.
        DMA = 1 << 0,
        /// A fast-registration MR (MP-08; the kernel's ib_alloc_mr with
        /// IB_MR_TYPE_MEM_REG): `pbl.npages` is the most pages it will map
        /// (1..=QUERY_DEVICE's max_fast_reg_pages); `access`, `iova`, `length`
        /// and the rest of `pbl` are zero. It is free (every access through its
        /// key fails) until a REG_MR WQE registers it; LOCAL_INV and
        /// SEND_WITH_INV make it free again. DEREG_MR takes any key byte of its
        /// index.
        FAST = 1 << 1,
        /// An on-demand paging MR (issue 29): `pbl` is all zero and every 4 KiB
        /// page starts not present; MAP_ODP installs pages, UNMAP_ODP removes
        /// them, and an access to a missing page raises a PAGE_FAULT EQE
        /// (`struct vhca_eqe_page_fault`). With iova 0 and length 2^64 - 1
        /// (`u64::MAX`) it is an implicit MR over the whole address space.
        /// BAD_PARAM together with FAST or DMA; NOT_SUPPORTED when the device
        /// has ODP off (QUERY_DEVICE's odp_caps 0).
        ODP = 1 << 2,
        /// An MR over device memory (issue 29 item 2; `ibv_reg_dm_mr`):
        /// `[iova, iova + length)` is the `length` bytes of device memory
        /// from byte `pbl.addr` (the DM byte offset, not a page list: BAR4
        /// offset `VHCA_DM_OFFSET + pbl.addr`); the rest of `pbl` is zero.
        /// Linear: byte `va` is DM byte `pbl.addr + (va - iova)`. Verbs
        /// register it zero-based (IBV_ACCESS_ZERO_BASED: iova 0). BAD_PARAM
        /// unless `[pbl.addr, pbl.addr + length)` lies inside the
        /// CAP_DM_SIZE bytes (so with CAP_DM_SIZE 0, always). Not with DMA
        /// or FAST.
        DM = 1 << 3,
    }
}

abi_struct! {
    /// REG_MR input (mailbox).
    pub struct RegMrIn (48) {
        pub pdn: u32,
        /// `VHCA_ACCESS_*`; remote write or atomic need local write (MP-04).
        pub access: u32,
        /// First virtual address; any byte alignment (MP-03).
        pub iova: u64,
        pub length: u64,
        /// `VHCA_REG_MR_F_*`.
        pub flags: u32,
        pub rsvd: u32,
        /// The pages spanned by [iova, iova + length), in order; the first holds
        /// iova at offset iova mod page size (MP-03).
        pub pbl: Pbl,
    }
}

abi_struct! {
    /// REG_MR and REREG_MR output. L_Key = R_Key = (index << 8) | key byte (MP-02).
    pub struct RegMrOut (8) {
        pub lkey: u32,
        pub rkey: u32,
    }
}

abi_consts! {
    /// REREG_MR `change` bits (`enum ibv_rereg_mr_flags`).
    pub mod rereg: u32 = "VHCA_REREG" {
        CHANGE_TRANSLATION = 1 << 0,
        CHANGE_PD = 1 << 1,
        CHANGE_ACCESS = 1 << 2,
    }
}

abi_struct! {
    /// REREG_MR input (mailbox): the fields `change` names replace the MR's.
    pub struct ReregMrIn (48) {
        pub lkey: u32,
        /// `VHCA_REREG_*`.
        pub change: u32,
        pub pdn: u32,
        pub access: u32,
        pub iova: u64,
        pub length: u64,
        pub pbl: Pbl,
    }
}

abi_consts! {
    /// On-demand paging (issue 29).
    pub mod odp_const: u32 = "VHCA_ODP" {
        /// log2 of the page size of every ODP translation (4 KiB).
        PAGE_SHIFT = 12,
        /// Most pages one MAP_ODP installs.
        MAX_MAP_PAGES = 512,
    }
}

abi_struct! {
    /// MAP_ODP input (mailbox): install the translations of `pbl.npages` 4 KiB
    /// pages of ODP MR `lkey` from `va` on (replacing what was there), and
    /// restart the work waiting on them.
    pub struct MapOdpIn (32) {
        pub lkey: u32,
        pub rsvd: u32,
        /// 4 KiB aligned, inside the MR.
        pub va: u64,
        /// page_shift 12 (`VHCA_ODP_PAGE_SHIFT`); the guest-physical (DMA)
        /// address of each page from `va` on; npages 1..=`VHCA_ODP_MAX_MAP_PAGES`.
        pub pbl: Pbl,
    }
}

abi_struct! {
    /// UNMAP_ODP and ODP_FAULT_FAIL input: a range of ODP MR `lkey`, rounded out
    /// to 4 KiB pages.
    pub struct UnmapOdpIn (24) {
        pub lkey: u32,
        pub rsvd: u32,
        pub va: u64,
        pub length: u64,
    }
}

abi_struct! {
    /// ODP_FAULT_FAIL input: the pages the guest could not fault in (same
    /// layout as `struct vhca_unmap_odp_in`).
    pub struct OdpFaultFailIn (24) {
        pub lkey: u32,
        pub rsvd: u32,
        pub va: u64,
        pub length: u64,
    }
}

abi_struct! {
    /// DEREG_MR input.
    pub struct DeregMrIn (4) {
        pub lkey: u32,
    }
}

abi_enum! {
    /// Memory window types (`enum ibv_mw_type`).
    pub enum MwType: u32 = "VHCA_MW" {
        /// Bound to a PD, bound and unbound by BIND_MW only (MP-06).
        Type1 = 1,
        /// Type 2B: bound to a QP, invalidated by LOCAL_INV or SEND_WITH_INV (MP-07).
        Type2 = 2,
        /// Type 2A: bound to a QP alone, invalidated by LOCAL_INV or
        /// SEND_WITH_INV; the QP cannot be destroyed while it is bound (MP-07).
        Type2A = 3,
    }
}

abi_struct! {
    /// ALLOC_MW input.
    pub struct AllocMwIn (8) {
        pub pdn: u32,
        /// `enum vhca_mw_type`.
        pub mw_type: u32,
    }
}

abi_struct! {
    /// ALLOC_MW output: the window's first R_Key, (index << 8) | key byte, in the
    /// key space MRs use (MP-02). BIND_MW gives it a new key byte each time.
    pub struct AllocMwOut (4) {
        pub rkey: u32,
    }
}

abi_struct! {
    /// DEALLOC_MW input: the window's current R_Key.
    pub struct DeallocMwIn (4) {
        pub rkey: u32,
    }
}
