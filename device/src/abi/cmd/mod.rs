//! The command queue (ARCHITECTURE.md §4): a ring of 64-byte commands in guest memory,
//! each with inline parameters and an optional mailbox, completed in place with a
//! status the driver maps to an errno.
//!
//! Here: the queue itself (slots, statuses, opcodes), the page list every ring
//! and MR is named by, and the table of commands. Each command's parameter
//! structs live with their object family (`port`: the device and its port;
//! `queues`: EQs, CQs, SRQs, QPs; `mr`: PDs, MRs, MWs), re-exported here so
//! that every one is `abi::cmd::X`. The C header's order is [`section`]'s, not
//! the files'.

mod mcast;
mod mr;
mod port;
mod queues;
mod rd;

pub use mcast::*;
pub use mr::*;
pub use port::*;
pub use queues::*;
pub use rd::*;

use transport::verbs::VerbError;

use super::layout::{entry, AbiStruct, Entry, Section, StructEntry, StructLayout};

abi_text! {
    /// How the command queue works.
    pub const COMMAND_PROTOCOL = "Command queue. The ring is 2^CMDQ_LOG2_SIZE slots of struct \
vhca_cmd, physically contiguous and 4 KiB aligned (BAR0 CMDQ_*). To post, the driver fills \
the slot at its producer index mod ring size with owner = 0, sets owner = \
VHCA_CMD_OWNER_DEVICE last (after a write barrier), and writes the new free-running \
producer index to CMDQ_PI. The device executes commands strictly in order, one at a time; \
for each it writes the outputs (inline into `data`, or into the output mailbox), \
`syndrome` and `status`, then clears owner (release ordering: everything written before \
owner reads as written once owner reads 0), advances CMDQ_CI, and, if the command has \
VHCA_CMD_F_EVENT, writes an EQE of type VHCA_EQE_COMMAND_DONE (object = token, data = \
status) to EQ 0 and signals vector 0. A slot the device should execute but does not own \
stops the queue (DEV_STATUS.FATAL, VHCA_FATAL_CMDQ_NOT_OWNED).\n\n\
Parameters: each opcode has an input and an output struct (or none). A struct of at most \
VHCA_CMD_INLINE_SIZE bytes travels inline in `data` (input there, zero-padded; output \
written over it); a larger one in a mailbox: a guest-physical buffer of at most \
VHCA_CMD_MAILBOX_MAX bytes that does not cross a 4 KiB page, named by in_mailbox/in_len or \
out_mailbox/out_len; a length must be at least the struct's size, and the device reads \
or writes exactly the struct's size.\n\n\
All or nothing: a command either succeeds completely or fails with nothing changed \
(QS-02, QS-09): no object is created, modified or destroyed in part, and on failure no \
output is written. Ring and page-list addresses are checked against the guest's memory \
map before anything changes (VHCA_STATUS_BAD_ADDRESS). The device also checks that every \
object number belongs to the kind expected (a CQN where a CQ is needed).";
}

abi_text! {
    /// How RESIZE_CQ and RESIZE_SRQ move a queue to a new ring.
    pub const RESIZE_PROTOCOL = "Resizing a CQ or an SRQ (RESIZE_CQ, RESIZE_SRQ). The device \
does the copy, at the moment it executes the command (commands and the data path never \
run at the same time, so that is a single point in the stream of CQEs and WQEs): before \
it, every CQE goes to the old ring and every WQE is read from the old ring; after it, only \
the new ring is used. Free-running indices carry on unchanged (the CQ's pi and the ci in \
its doorbell slot; the SRQ's pi and the device's fetch index), only the ring size changes, \
so entry k lives in slot k mod the new size from then on.\n\n\
RESIZE_CQ: the device reads ci from the CQ's doorbell slot; the driver stores its \
consumer index there before the command and consumes nothing from the command until it \
has switched to the new ring (it may hold its CQ lock across the command; a consumer \
that does poll the old ring meanwhile is harmless: it only sees entries the device \
copied, at the same indices). The CQEs written and not consumed, [ci, pi), plus those \
the device holds and has not written yet, must fit the new ring, else BAD_PARAM (EINVAL) \
and nothing changes. The device copies [ci, pi) into the new ring at the same indices, \
each with the owner bit of its index in the new ring, and writes into every other slot \
an owner byte that does not match the next index to land there (the rest of such a slot \
is undefined). So the driver need not zero the new ring, and after the command it only \
swaps its ring pointer and size, keeping ci; the old ring is free. An overflowed CQ \
(CQ-03) cannot be resized (BAD_STATE). Arming is unchanged.\n\n\
RESIZE_SRQ: the driver posts nothing from the command until it has switched. The WQEs \
posted and not yet fetched by the device, [fetched, pi) with pi read from the SRQ's \
doorbell slot, are copied into the new ring at the same indices; WQEs already fetched \
live in the device. The stride stays. The new size must hold max_wr, and every WQE \
posted and not consumed (fetched or not), else BAD_PARAM; growing is always possible up \
to the device's max_srq_wr (beyond: LIMIT_EXCEEDED). The armed limit is unchanged. The \
driver must still not post more than the new size past the oldest WQE whose receive \
completion it has not seen.";
}

abi_consts! {
    /// Command queue constants.
    pub mod cmd_const: u32 = "VHCA_CMD" {
        /// Bytes per command slot: one cache line, as erdma's command SQE.
        SLOT_SIZE = 64,
        /// Bytes of inline parameters in a slot (`data`).
        INLINE_SIZE = 32,
        /// Largest mailbox: one 4 KiB page, so it is always one DMA page.
        MAILBOX_MAX = 4096,
    }
}

abi_consts! {
    /// Command `flags` bits.
    pub mod cmd_flags: u8 = "VHCA_CMD_F" {
        /// Post an EQE of type COMMAND_DONE on EQ 0 when the command completes,
        /// so the driver can sleep instead of polling `owner`.
        EVENT = 1 << 0,
    }
}

abi_consts! {
    /// Command `owner` bits.
    pub mod cmd_owner: u8 = "VHCA_CMD_OWNER" {
        /// Set by the driver last when posting; cleared by the device last when
        /// the command is complete.
        DEVICE = 1 << 0,
    }
}

abi_struct! {
    /// One command slot.
    pub struct Cmd (64) {
        /// `enum vhca_opcode`.
        pub opcode: u16,
        /// Driver's cookie, echoed in the COMMAND_DONE event.
        pub token: u16,
        /// `VHCA_CMD_F_*`.
        pub flags: u8,
        /// Device-written: `enum vhca_status`.
        pub status: u8,
        /// `VHCA_CMD_OWNER_*`.
        pub owner: u8,
        /// Zero.
        pub rsvd0: u8,
        /// Device-written: which check failed, for the driver's log (0 on success;
        /// device-specific, not ABI).
        pub syndrome: u32,
        /// Bytes of the input mailbox (0 if none).
        pub in_len: u16,
        /// Bytes of the output mailbox (0 if none).
        pub out_len: u16,
        /// Guest-physical address of the input mailbox.
        pub in_mailbox: u64,
        /// Guest-physical address of the output mailbox.
        pub out_mailbox: u64,
        /// Inline input, then inline output.
        pub data: [u8; 32],
    }
}

abi_enum! {
    /// Command completion status. Each maps to one errno (`vhca_status_errno`).
    pub enum Status: u8 = "VHCA_STATUS" {
        /// Done.
        Ok = 0,
        /// Unknown opcode.
        BadOpcode = 1,
        /// A parameter is out of range or inconsistent (reserved bits, a ring
        /// smaller than its WQE count, a bad page list).
        BadParam = 2,
        /// Not allowed in the object's current state (QP transition or attribute
        /// mask, QS-02).
        BadState = 3,
        /// No room for another object of this kind.
        NoResources = 4,
        /// No live object has this number.
        NotFound = 5,
        /// The PD does not exist (QS-09).
        BadPd = 6,
        /// A CQ does not exist (QS-09).
        BadCq = 7,
        /// The SRQ does not exist.
        BadSrq = 8,
        /// More WRs or SGEs than the device supports (QS-09 "caps exceeded").
        LimitExceeded = 9,
        /// The object is in use (a PD with MRs, a CQ with QPs; a doorbell slot
        /// already taken).
        Busy = 10,
        /// A valid request the device does not implement.
        NotSupported = 11,
        /// Not allowed (e.g. the reserved doorbell slot of EQ 0).
        Permission = 12,
        /// A mailbox, ring or page-list address is outside the guest's memory.
        BadAddress = 13,
        /// Transient: try again (the device is resetting).
        Again = 14,
    }
}

/// Linux errno values (asm-generic numbers, as on x86-64) of the statuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Errno {
    Eperm = 1,
    Enoent = 2,
    Eio = 5,
    Eagain = 11,
    Enomem = 12,
    Efault = 14,
    Ebusy = 16,
    Einval = 22,
    Eopnotsupp = 95,
}

impl Errno {
    /// The C name, e.g. `EINVAL`.
    pub fn name(self) -> String {
        format!("{self:?}").to_ascii_uppercase()
    }
}

impl Status {
    /// The errno the driver returns for this status (0 for `Ok`). Chosen as
    /// ibverbs callers expect: bad attributes, handles and caps are EINVAL, lack
    /// of resources ENOMEM.
    pub const fn errno(self) -> Option<Errno> {
        Some(match self {
            Status::Ok => return None,
            Status::BadOpcode => Errno::Eopnotsupp,
            Status::BadParam => Errno::Einval,
            Status::BadState => Errno::Einval,
            Status::NoResources => Errno::Enomem,
            Status::NotFound => Errno::Enoent,
            Status::BadPd => Errno::Einval,
            Status::BadCq => Errno::Einval,
            Status::BadSrq => Errno::Einval,
            Status::LimitExceeded => Errno::Einval,
            Status::Busy => Errno::Ebusy,
            Status::NotSupported => Errno::Eopnotsupp,
            Status::Permission => Errno::Eperm,
            Status::BadAddress => Errno::Efault,
            Status::Again => Errno::Eagain,
        })
    }
}

/// Errno the driver uses for a status it does not know (a newer device).
pub const UNKNOWN_STATUS_ERRNO: Errno = Errno::Eio;

impl From<VerbError> for Status {
    /// The status of a command the engine refused (its refusals change nothing, as
    /// the ABI promises).
    fn from(e: VerbError) -> Status {
        match e {
            VerbError::InsufficientResources => Status::NoResources,
            VerbError::InvalidHandle => Status::NotFound,
            VerbError::InvalidPd => Status::BadPd,
            VerbError::InvalidCq => Status::BadCq,
            VerbError::InvalidSrq => Status::BadSrq,
            VerbError::MaxWrExceeded | VerbError::MaxSgeExceeded => Status::LimitExceeded,
            VerbError::InvalidAttr => Status::BadParam,
            VerbError::InvalidTransition | VerbError::InvalidWr => Status::BadState,
            VerbError::QueueFull => Status::NoResources,
            VerbError::Busy => Status::Busy,
            VerbError::NotSupported => Status::NotSupported,
        }
    }
}

abi_enum! {
    /// Command opcodes. Numbers are grouped by object kind; 0 is invalid, so a
    /// zeroed slot is never a command.
    pub enum Opcode: u16 = "VHCA_CMD" {
        /// Does nothing; tests the queue at probe.
        Nop = 0x0001,
        /// Device attributes.
        QueryDevice = 0x0002,
        /// Port attributes, P_Key table and GID 0.
        QueryPort = 0x0003,
        /// One set of counters of a port.
        QueryCounters = 0x0004,
        /// Set or clear one entry of a RoCE port's GID table (WF-10): the
        /// driver mirrors ib_core's table (`add_gid`/`del_gid`), and a RoCE
        /// QP's or AH's `sgid_index` names the source address of its frames.
        /// NOT_SUPPORTED on an InfiniBand port.
        SetGid = 0x0005,
        /// Hand one subnet-management MAD for the port to the device's SMA
        /// (AD-09, AD-12; issue 26), as mlx4/mlx5 `process_mad` hand them to
        /// firmware (MAD_IFC): a SubnGet/SubnSet/SubnTrapRepress (class 0x01
        /// LID-routed or 0x81 directed route) that ib_core's SMI takes locally
        /// (`handle_outgoing_dr_smp`). Output: the SMA's response, if it made
        /// one (ABI 3.5).
        MadIfc = 0x0006,
        /// Set and clear the port's host-settable PortInfo:CapabilityMask bits
        /// (`VHCA_PORT_CAP_HOST_SETTABLE`) in the device's SMA, as mlx4's
        /// SET_PORT does from `modify_port`: the driver passes ib_core's
        /// set/clr_port_cap_mask (IsSM while an SM holds issm, IsCM from
        /// ib_cm). A change sends trap 144 to the SM (AD-09; ABI 3.6).
        /// BAD_PARAM for another bit or one both set and cleared (nothing
        /// changes); NOT_SUPPORTED on a port with no SMA (RoCE). Output: the
        /// CapabilityMask now.
        SetPortCaps = 0x0007,
        /// Set the node's NodeDescription in the device's SMA, as mlx4's
        /// SET_NODE does from `modify_device` (sysfs `node_desc`, rdma-ndd): what
        /// SubnGet(NodeDescription) answers from then on; a change sends trap
        /// 144 with NodeDescriptionChange (AD-09; ABI 3.6). BAD_PARAM for a
        /// length past 64, a NUL within it or a byte after it that is not NUL;
        /// NOT_SUPPORTED on a port with no SMA. A device reset brings back the
        /// device's own description and capability bits.
        SetNodeDesc = 0x0008,
        /// Allocate a protection domain (MP-01).
        AllocPd = 0x0010,
        /// Deallocate a PD; BUSY while an MR, QP or SRQ uses it.
        DeallocPd = 0x0011,
        /// Create a completion event queue.
        CreateEq = 0x0020,
        /// Destroy an EQ; BUSY while a CQ uses it.
        DestroyEq = 0x0021,
        /// Create a CQ (CQ-01).
        CreateCq = 0x0028,
        /// Destroy a CQ; BUSY while a QP uses it.
        DestroyCq = 0x0029,
        /// Move a CQ to a new ring of another size (CQ-04), keeping the CQEs
        /// not yet consumed (RESIZE_PROTOCOL).
        ResizeCq = 0x002A,
        /// Create an SRQ (SR-01).
        CreateSrq = 0x0030,
        /// Set and arm the SRQ limit.
        ModifySrq = 0x0031,
        /// SRQ attributes.
        QuerySrq = 0x0032,
        /// Destroy an SRQ; BUSY while a QP uses it.
        DestroySrq = 0x0033,
        /// Move an SRQ to a new ring of another size (`ibv_modify_srq` with
        /// IBV_SRQ_MAX_WR), keeping the WQEs posted (RESIZE_PROTOCOL).
        ResizeSrq = 0x0034,
        /// Create a QP, in Reset (QS-09).
        CreateQp = 0x0040,
        /// Modify a QP (QS-01, QS-02).
        ModifyQp = 0x0041,
        /// QP attributes.
        QueryQp = 0x0042,
        /// Destroy a QP.
        DestroyQp = 0x0043,
        /// Register a memory region (MP-02, MP-03).
        RegMr = 0x0050,
        /// Reregister a memory region; the keys stay the same.
        ReregMr = 0x0051,
        /// Deregister a memory region; BUSY while a memory window is bound to it.
        DeregMr = 0x0052,
        /// Install translations of an ODP MR (`struct vhca_map_odp_in`) and
        /// restart the work waiting on them (issue 29). BAD_PARAM for a key that
        /// is not an ODP MR, a range outside it, a va not 4 KiB aligned or a bad
        /// page list; NOT_SUPPORTED when ODP is off.
        MapOdp = 0x0053,
        /// Remove translations of an ODP MR (`struct vhca_unmap_odp_in`): when
        /// the command completes no device access uses them any more. BAD_PARAM
        /// as MAP_ODP.
        UnmapOdp = 0x0054,
        /// The guest could not fault in these pages of an ODP MR (`struct
        /// vhca_odp_fault_fail_in`): work waiting on them fails (requester:
        /// error completion and the QP to Error; responder: NAK remote access
        /// error on the retry). BAD_PARAM as MAP_ODP.
        OdpFaultFail = 0x0055,
        /// Allocate a memory window (MP-06, MP-07), unbound.
        AllocMw = 0x0058,
        /// Deallocate a memory window (bound or not).
        DeallocMw = 0x0059,
        /// Attach a UD QP to a multicast group (AD-08): from then on the
        /// group's packets (DestQP 0xFFFFFF, GRH with the MGID) reach it.
        /// Attaching twice is no error. BAD_PARAM for a QP that is not UD, a
        /// GID that is not multicast, a LID outside 0xC000..=0xFFFE on
        /// InfiniBand or another LID than the group's; NO_RESOURCES past
        /// QUERY_DEVICE's max_mcast_grp, max_mcast_qp_attach or
        /// max_total_mcast_qp_attach. Destroying a QP detaches it.
        AttachMcast = 0x0070,
        /// Detach a QP from a multicast group (AD-08); BAD_PARAM when it was
        /// not attached.
        DetachMcast = 0x0071,
        /// Open an XRC domain (SR-02).
        AllocXrcd = 0x0012,
        /// Close an XRC domain; BUSY while an XRC SRQ or XRC TGT QP is in it.
        DeallocXrcd = 0x0013,
        /// Allocate a Reliable Datagram domain (AD-11); NO_RESOURCES past
        /// the device's bound.
        AllocRdd = 0x0014,
        /// Deallocate an RD domain; BUSY while an EE context or RD QP is in it.
        DeallocRdd = 0x0015,
        /// Create an EE context in an RD domain (AD-11), in Reset.
        CreateEec = 0x0080,
        /// Modify an EE context: Reset->Init (P_Key index), Init->RTR (path,
        /// MTU, remote EECN, receive PSN, RNR timer), RTR->RTS (send PSN,
        /// timeout, retry counts), RTS->RTS, any->Reset, any->Error.
        ModifyEec = 0x0081,
        /// EE context attributes and RD domain.
        QueryEec = 0x0082,
        /// Destroy an EE context; the messages it carries fail.
        DestroyEec = 0x0083,
    }
}

abi_consts! {
    /// Page-list (`struct vhca_pbl`) constants.
    pub mod pbl_const: u32 = "VHCA_PBL" {
        /// `levels`: `addr` is the first of `npages` physically contiguous pages
        /// (kernel rings from dma_alloc_coherent).
        CONTIGUOUS = 0,
        /// `levels`: `addr` is a physically contiguous array of `npages` u64 page
        /// addresses, 8-byte aligned. Best kept within one 4 KiB page (512 pages);
        /// larger lists should use TWO_LEVEL, which needs no large contiguous
        /// allocation in the guest.
        ONE_LEVEL = 1,
        /// `levels`: `addr` is a physically contiguous array of ceil(npages / 512)
        /// u64 addresses of 4 KiB-aligned tables, each of 512 page addresses (the
        /// last one partly used): one 4 KiB directory covers 262144 pages, as
        /// pvrdma's page directory.
        TWO_LEVEL = 2,
        /// Bytes per second-level table, whatever the data page size.
        TABLE_SIZE = 4096,
        /// Page addresses per second-level table.
        TABLE_ENTRIES = 512,
        /// Most pages in one list: 1 GiB of 4 KiB pages; bounds what one command
        /// makes the device read and keep.
        MAX_PAGES = 1 << 18,
        /// Smallest data page: 4 KiB (the engine's MIN_PAGE_SIZE).
        MIN_PAGE_SHIFT = 12,
        /// Largest data page: 1 GiB (the engine's MAX_PAGE_SIZE).
        MAX_PAGE_SHIFT = 30,
    }
}

abi_struct! {
    /// A page list: where a ring or an MR lives in guest-physical memory, page by
    /// page (user buffers are not physically contiguous; ARCHITECTURE.md §4). Data pages
    /// are 2^page_shift bytes and aligned to that. A ring starts at the first byte
    /// of its first page, and its entries never straddle a page (strides are at
    /// most 4 KiB).
    pub struct Pbl (16) {
        /// Guest-physical address: the first page, or the list (`levels`).
        pub addr: u64,
        /// Data pages.
        pub npages: u32,
        /// log2 of the data page size (VHCA_PBL_MIN_PAGE_SHIFT..=MAX).
        pub page_shift: u8,
        /// `VHCA_PBL_CONTIGUOUS`, `ONE_LEVEL` or `TWO_LEVEL`.
        pub levels: u8,
        /// Zero.
        pub rsvd: u16,
    }
}

/// One command: its opcode and parameter structs.
#[derive(Clone, Copy)]
pub struct CommandSpec {
    pub opcode: Opcode,
    pub input: Option<StructEntry>,
    pub output: Option<StructEntry>,
}

/// Where a parameter struct travels (the rule of [`COMMAND_PROTOCOL`]).
pub fn travels_inline(layout: &StructLayout) -> bool {
    layout.size <= cmd_const::INLINE_SIZE as usize
}

fn spec(opcode: Opcode, input: Option<StructEntry>, output: Option<StructEntry>) -> CommandSpec {
    CommandSpec {
        opcode,
        input,
        output,
    }
}

fn e<T: AbiStruct>() -> Option<StructEntry> {
    Some(entry::<T>())
}

/// Every command's parameters, one per opcode, in opcode order.
pub fn commands() -> Vec<CommandSpec> {
    Opcode::ALL
        .iter()
        .map(|&op| match op {
            Opcode::Nop => spec(op, None, None),
            Opcode::QueryDevice => spec(op, None, e::<DeviceAttr>()),
            Opcode::QueryPort => spec(op, e::<QueryPortIn>(), e::<PortAttr>()),
            Opcode::QueryCounters => spec(op, e::<QueryCountersIn>(), e::<QueryCountersOut>()),
            Opcode::AllocPd => spec(op, None, e::<AllocPdOut>()),
            Opcode::DeallocPd => spec(op, e::<DeallocPdIn>(), None),
            Opcode::CreateEq => spec(op, e::<CreateEqIn>(), e::<CreateEqOut>()),
            Opcode::DestroyEq => spec(op, e::<DestroyEqIn>(), None),
            Opcode::CreateCq => spec(op, e::<CreateCqIn>(), e::<CreateCqOut>()),
            Opcode::DestroyCq => spec(op, e::<DestroyCqIn>(), None),
            Opcode::ResizeCq => spec(op, e::<ResizeCqIn>(), e::<ResizeCqOut>()),
            Opcode::CreateSrq => spec(op, e::<CreateSrqIn>(), e::<CreateSrqOut>()),
            Opcode::ModifySrq => spec(op, e::<ModifySrqIn>(), None),
            Opcode::QuerySrq => spec(op, e::<QuerySrqIn>(), e::<QuerySrqOut>()),
            Opcode::DestroySrq => spec(op, e::<DestroySrqIn>(), None),
            Opcode::ResizeSrq => spec(op, e::<ResizeSrqIn>(), e::<ResizeSrqOut>()),
            Opcode::CreateQp => spec(op, e::<CreateQpIn>(), e::<CreateQpOut>()),
            Opcode::ModifyQp => spec(op, e::<ModifyQpIn>(), None),
            Opcode::QueryQp => spec(op, e::<QueryQpIn>(), e::<QueryQpOut>()),
            Opcode::DestroyQp => spec(op, e::<DestroyQpIn>(), None),
            Opcode::RegMr => spec(op, e::<RegMrIn>(), e::<RegMrOut>()),
            Opcode::ReregMr => spec(op, e::<ReregMrIn>(), e::<RegMrOut>()),
            Opcode::DeregMr => spec(op, e::<DeregMrIn>(), None),
            Opcode::MapOdp => spec(op, e::<MapOdpIn>(), None),
            Opcode::UnmapOdp => spec(op, e::<UnmapOdpIn>(), None),
            Opcode::OdpFaultFail => spec(op, e::<OdpFaultFailIn>(), None),
            Opcode::AllocMw => spec(op, e::<AllocMwIn>(), e::<AllocMwOut>()),
            Opcode::SetGid => spec(op, e::<SetGidIn>(), None),
            Opcode::MadIfc => spec(op, e::<MadIfcIn>(), e::<MadIfcOut>()),
            Opcode::SetPortCaps => spec(op, e::<SetPortCapsIn>(), e::<SetPortCapsOut>()),
            Opcode::SetNodeDesc => spec(op, e::<SetNodeDescIn>(), None),
            Opcode::DeallocMw => spec(op, e::<DeallocMwIn>(), None),
            Opcode::AttachMcast => spec(op, e::<McastIn>(), None),
            Opcode::DetachMcast => spec(op, e::<McastIn>(), None),
            Opcode::AllocXrcd => spec(op, None, e::<AllocXrcdOut>()),
            Opcode::DeallocXrcd => spec(op, e::<DeallocXrcdIn>(), None),
            Opcode::AllocRdd => spec(op, None, e::<AllocRddOut>()),
            Opcode::DeallocRdd => spec(op, e::<DeallocRddIn>(), None),
            Opcode::CreateEec => spec(op, e::<CreateEecIn>(), e::<CreateEecOut>()),
            Opcode::ModifyEec => spec(op, e::<ModifyEecIn>(), None),
            Opcode::QueryEec => spec(op, e::<QueryEecIn>(), e::<QueryEecOut>()),
            Opcode::DestroyEec => spec(op, e::<DestroyEecIn>(), None),
        })
        .collect()
}

/// The command queue.
pub fn section() -> Section {
    let mut entries = vec![
        Entry::Text(COMMAND_PROTOCOL),
        Entry::Text(RESIZE_PROTOCOL),
        Entry::Consts(cmd_const::layout()),
        Entry::Consts(cmd_flags::layout()),
        Entry::Consts(cmd_owner::layout()),
        Entry::Struct(entry::<Cmd>()),
        Entry::Enum(Status::layout()),
        Entry::Enum(Opcode::layout()),
        Entry::Consts(pbl_const::layout()),
        Entry::Struct(entry::<Pbl>()),
        Entry::Struct(entry::<Av>()),
        Entry::Struct(entry::<AltPath>()),
        Entry::Struct(entry::<QpCap>()),
        Entry::Struct(entry::<QpAttr>()),
        Entry::Consts(reg_mr_flags::layout()),
        Entry::Consts(odp_const::layout()),
        Entry::Consts(rereg::layout()),
        Entry::Enum(MwType::layout()),
        Entry::Enum(GidType::layout()),
        Entry::Consts(mad_ifc_flag::layout()),
        Entry::Consts(port_cap::layout()),
        Entry::Consts(odp_cap::layout()),
        Entry::Consts(odp_transport::layout()),
        Entry::Struct(entry::<EecAttr>()),
    ];
    // Parameter structs in opcode order, each once (REG_MR and REREG_MR share
    // their output).
    let mut seen = Vec::new();
    for c in commands() {
        for s in [c.input, c.output].into_iter().flatten() {
            let name = (s.layout)().name;
            if !seen.contains(&name) {
                seen.push(name);
                entries.push(Entry::Struct(s));
            }
        }
    }
    entries.push(Entry::Commands);
    entries.push(Entry::StatusErrno);
    Section {
        title: "Command queue",
        entries,
    }
}
