//! BAR2: doorbell pages (UARs) for a polling device (ARCHITECTURE.md §4).
//!
//! BAR2 is `CAP_NUM_UARS` pages of 4 KiB, backed by a memfd the device maps too.
//! The guest stores into them like memory: no exit. The device polls each page's
//! doorbell summary and reads only the producer slots it flags (a round costs
//! O(pages + work), not O(queues), issue 12), and sleeps when idle; then, and only
//! then, a driver rings the trapped WAKE register after its store.

use super::layout::{Entry, Section};

abi_text! {
    /// The doorbell page layout and the sleep/wake protocol.
    pub const DOORBELL_PROTOCOL = "Doorbell pages (BAR2). Page u is bytes [u * 4096, (u + 1) * \
4096) of BAR2. UAR 0 belongs to the kernel driver (its QPs and CQs, and every EQ); the \
driver hands pages 1.. to user contexts, one each, to mmap. A page holds a 64-byte header \
(struct vhca_uar_header) written by the device, then the 64-byte doorbell summary (struct \
vhca_uar_summary) written by producers and taken by the device, then 8-byte doorbell \
slots: slot s is at byte s * 8, for s in VHCA_UAR_FIRST_SLOT..VHCA_UAR_SLOTS. The header \
keeps the line the device writes apart from the lines the driver writes. The driver picks \
a free (page, slot) for each QP, SRQ, CQ and EQ and passes it to the create command; the \
device refuses a slot already in use (VHCA_STATUS_BUSY) or out of range, and slot \
VHCA_UAR_EQ0_SLOT of UAR 0, which is EQ 0's. The slot is the object's until it is \
destroyed.\n\n\
Slots hold free-running 32-bit indices: a producer index counts WQEs ever posted, a \
consumer index entries ever consumed; ring entry = index mod ring size. The driver stores \
each 32-bit word with one aligned store.\n\n\
Producer slots (QP: sq_pi, rq_pi; SRQ: pi) tell the device about new work, so they need \
the summary and the wake protocol; a CQ's arm word needs the summary only (see Arming). \
The summary is a 512-bit little-endian bitmap, one bit per slot of its page: slot s is bit \
s % 32 of summary word s / 32 (bit s % 8 of byte s / 8, so a bitmap of 64-bit words \
numbers the bits the same). The device reads QP, SRQ and CQ slots only where a summary \
bit sends it: a producer index or arm word stored without its bit is not seen (until the \
bit of the same slot is set again).\n\n\
Driver: write the WQE; store the new producer index; set the slot's summary bit with an \
atomic OR (a locked read-modify-write: other producers of the page and the device write \
the same words), ordered after the index store; full fence (smp_mb / \
atomic_thread_fence(seq_cst): the index and the bit must be visible before the load \
below); load the page's asleep word; if it is nonzero, write BAR0 WAKE (kernel) or the \
WAKE page, BAR4 (user contexts, which the kernel maps it into).\n\n\
Device: each round, for every page holding a QP's, SRQ's or CQ's slot, it loads the summary \
words, takes each nonzero one with an atomic swap to zero, then loads the producer slots \
whose bits it took (an index stored before a bit is therefore seen by the load that \
follows the swap taking that bit; a bit set after the swap stays for the next round). To \
sleep: store asleep = 1 in every UAR page in use; full fence; load the summaries again; \
if a bit is set, store asleep = 0 and go on polling, else sleep until WAKE (or a packet \
or timer). On waking it stores asleep = 0 before scanning.\n\n\
Either the driver's load sees asleep = 1 and it rings WAKE, or the device's rescan sees \
the summary bit (Dekker: each side stores, fences, then loads the other's word; the \
driver's stores are the index and the bit), so work is never left unseen; an awake \
device costs the driver no exit. A spurious WAKE is harmless.\n\n\
A summary bit is a hint, never trusted: a bit for a free slot, an EQ's slot, or a \
slot whose word did not move costs the device one slot read and is dropped; a bit of a \
page with no QP, SRQ or CQ is not even read. A page's summary is written only by the holder \
of that page (a user context mmaps its own page alone), so a guest process that sets or \
clears bits, or never sets them, affects only its own queues: those it leaves unflagged \
starve, nobody else's. The device keeps no cross-page summary a context could write.\n\n\
Consumer and arm slots (CQ: ci, arm; EQ: ci, arm) need no WAKE: the device reads a \
consumer index only when it is about to write a CQE or EQE, a CQ's arm word when it takes \
the slot's summary bit (in a round, before it writes that round's CQEs), and an EQ's arm \
word when it raises interrupts; it is awake then.\n\n\
Arming: a CQ's arm word is (sequence number, 31 bits) | VHCA_CQ_ARM_SOLICITED. The driver \
arms by storing a word different from the last (increment the sequence number), then \
setting the slot's summary bit (atomic OR, ordered after the store; no fence or WAKE); the \
device takes a changed word as one request for an event on the next completion (or next \
solicited one, or an error), as ibv_req_notify_cq. If the CQ holds CQEs the driver has \
not consumed (pi != the slot's ci) when the device sees the changed word, the event is \
raised at once, so arm-then-poll never misses a CQE that landed in between (a spurious \
event costs the driver one empty poll). The arm word found in the slot at CREATE_CQ is \
the baseline, not a request. An EQ's arm word is a sequence number: a changed word lets \
the device raise the EQ's vector once more, at once if EQEs are waiting (pi != ci), else \
after the next EQE; the word found at CREATE_EQ is the baseline (EQ 0: zero, so an arm \
stored before ENABLE counts). After an interrupt the driver consumes the EQEs, stores ci, \
then stores a new arm word. The device never interprets a WQE's wr_id: it returns it in \
the CQE as is, so a driver may keep its own ring index there.";
}

abi_consts! {
    /// Doorbell page geometry.
    pub mod uar: u32 = "VHCA_UAR" {
        /// Bytes per UAR page: one x86 page, so each can be mmapped on its own.
        PAGE_SIZE = 4096,
        /// Bytes of the device-written header at the start of every page (one
        /// cache line).
        HEADER_SIZE = 64,
        /// Byte offset of the doorbell summary (struct vhca_uar_summary) in a page.
        SUMMARY_OFFSET = 64,
        /// Bytes of the summary: one bit per slot of the page.
        SUMMARY_SIZE = 64,
        /// Bytes per doorbell slot (two 32-bit words).
        SLOT_SIZE = 8,
        /// First slot number (slots below it are the header and the summary).
        FIRST_SLOT = 16,
        /// Slots per page, header included: valid slot numbers are FIRST_SLOT..SLOTS.
        SLOTS = 512,
        /// The kernel driver's page.
        KERNEL_UAR = 0,
        /// EQ 0's doorbell slot (struct vhca_eq_doorbell) in UAR 0; reserved.
        EQ0_SLOT = 16,
        /// Value of `asleep` while the device polls.
        AWAKE = 0,
        /// Value of `asleep` while the device sleeps: ring WAKE after a doorbell.
        ASLEEP = 1,
    }
}

abi_consts! {
    /// CQ arm word bits (struct vhca_cq_doorbell `arm`).
    pub mod cq_arm: u32 = "VHCA_CQ_ARM" {
        /// Event only for a solicited completion (or an error); clear: for the next
        /// completion (CQ-02). Arming for "next" after "solicited" widens the
        /// request, never narrows it.
        SOLICITED = 1 << 31,
        /// Sequence number bits: change them to make a new request.
        SN_MASK = 0x7fff_ffff,
    }
}

abi_struct! {
    /// The first 64 bytes of every doorbell page: written by the device only.
    pub struct UarHeader (64) {
        /// `VHCA_UAR_ASLEEP` while the device sleeps, else `VHCA_UAR_AWAKE`.
        pub asleep: u32,
        /// Zero.
        pub rsvd: [u32; 15],
    }
}

abi_struct! {
    /// The doorbell summary, bytes 64..128 of every page: bit s (bit s % 32 of
    /// `bits[s / 32]`) says slot s's producer index may have moved. Producers set
    /// bits with an atomic OR; the device takes a word with an atomic swap to zero
    /// (ARCHITECTURE.md §2, §4).
    pub struct UarSummary (64) {
        /// One bit per slot; bits below `VHCA_UAR_FIRST_SLOT` are ignored.
        pub bits: [u32; 16],
    }
}

abi_struct! {
    /// A QP's doorbell slot, written by the driver.
    pub struct QpDoorbell (8) {
        /// Send WQEs ever posted (free-running).
        pub sq_pi: u32,
        /// Receive WQEs ever posted (free-running); unused with an SRQ.
        pub rq_pi: u32,
    }
}

abi_struct! {
    /// An SRQ's doorbell slot, written by the driver.
    pub struct SrqDoorbell (8) {
        /// Receive WQEs ever posted (free-running).
        pub pi: u32,
        /// Zero.
        pub rsvd: u32,
    }
}

abi_struct! {
    /// A CQ's doorbell slot, written by the driver.
    pub struct CqDoorbell (8) {
        /// CQEs ever consumed (free-running): the device never writes more than the
        /// ring size past it; a CQE that does not fit is a CQ overflow (CQ-03).
        pub ci: u32,
        /// Arm word: `VHCA_CQ_ARM_*`.
        pub arm: u32,
    }
}

abi_struct! {
    /// An EQ's doorbell slot (always in UAR 0), written by the driver.
    pub struct EqDoorbell (8) {
        /// EQEs ever consumed (free-running).
        pub ci: u32,
        /// Arm sequence number: a new value allows one more interrupt.
        pub arm: u32,
    }
}

/// The doorbell page.
pub fn section() -> Section {
    use super::layout::entry;
    Section {
        title: "BAR2 doorbell pages (UARs)",
        entries: vec![
            Entry::Text(DOORBELL_PROTOCOL),
            Entry::Consts(uar::layout()),
            Entry::Consts(cq_arm::layout()),
            Entry::Struct(entry::<UarHeader>()),
            Entry::Struct(entry::<UarSummary>()),
            Entry::Struct(entry::<QpDoorbell>()),
            Entry::Struct(entry::<SrqDoorbell>()),
            Entry::Struct(entry::<CqDoorbell>()),
            Entry::Struct(entry::<EqDoorbell>()),
        ],
    }
}
