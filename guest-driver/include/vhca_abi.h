/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * vhca_abi.h: the vhca device ABI, version 3.7.
 *
 * GENERATED from device/src/abi/ (the only source) by
 *     cargo run -p device --bin vhca-abi-header > guest-driver/include/vhca_abi.h
 * Do not edit: change the Rust source and regenerate; device/tests/abi_header.rs
 * fails while this file is stale.
 *
 * All multi-byte fields are little-endian; structs have no implicit padding and
 * every field is naturally aligned.
 */

#ifndef VHCA_ABI_H
#define VHCA_ABI_H

#if defined(__KERNEL__)
#include <linux/types.h>
#include <linux/stddef.h>
#include <linux/errno.h>
#elif defined(__linux__)
#include <linux/types.h>
#include <stddef.h>
#include <errno.h>
#else
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
typedef uint8_t __u8;
typedef uint16_t __u16;
typedef uint32_t __u32;
typedef uint64_t __u64;
#endif

/* ============== PCI identity, ABI version, BARs and MSI-X =============== */

/* Identity of the PCI function and of the ABI. */
/*
 * Experimental vendor ID, as QEMU's `edu` device uses: never a real HCA
 * vendor's, so that mlx4/mlx5 never bind (ARCHITECTURE.md §4). In-tree Linux
 * claims only 0x1234:0x1111 (bochs-drm); QEMU's edu (0x11e8) has no driver.
 */
#define VHCA_PCI_VENDOR_ID           0x1234U
/*
 * Device ID: "1b" for InfiniBand, "ca" for channel adapter. No in-tree driver
 * matches 0x1234:0x1bca (checked against Linux's PCI ID tables and QEMU's
 * docs/specs/pci-ids.rst; the guest image should also check its own
 * modules.alias).
 */
#define VHCA_PCI_DEVICE_ID           0x1bcaU
/* Subsystem vendor: QEMU's (Red Hat / Qumranet) for emulated devices. */
#define VHCA_PCI_SUBSYSTEM_VENDOR_ID 0x1af4U
/* Subsystem ID QEMU uses for emulated hardware devices (pci-ids.rst). */
#define VHCA_PCI_SUBSYSTEM_ID        0x1100U
/* Class code (base, sub, prog-if): serial bus controller, InfiniBand. */
#define VHCA_PCI_CLASS               0x0c0600U
/* PCI revision; the ABI version below is what matters. */
#define VHCA_PCI_REVISION            0x01U
/*
 * ABI version: major << 16 | minor. A driver binds only to a device with the
 * same major and a minor at least its own; minors only append fields to
 * mailbox structs and add opcodes. Major 2: the RoCEv2 port (the address
 * vector grew a destination MAC, WF-10). Major 3: the doorbell summary (slots
 * start at 16; a producer index needs its summary bit) and fast-registration
 * MRs (MP-08: REG_MR's FAST flag, the REG_MR WQE, DeviceAttr's
 * max_fast_reg_pages). Minor 1: UD multicast (ATTACH_MCAST, DETACH_MCAST,
 * DeviceAttr's max_mcast_*; AD-08). Minor 2: XRC (ALLOC/DEALLOC_XRCD,
 * CreateSrqIn's XRC fields, CreateQpIn's xrcdn, the send WQE's XRC segment,
 * the CQE's srqn; SR-02), memory windows of type 2A (MP-07), QueryPortOut's
 * max_vl_num (AD-06), the alternate path in ModifyQpIn / QueryQpOut (AD-10)
 * and new counter names: each in reserved bytes or appended. Minor 3: the
 * address vector's pkey_index (reserved bytes before), a GSI send WQE's P_Key
 * index (AD-05, PV-03). Minor 4: Reliable Datagram (AD-11: ALLOC/DEALLOC_RDD,
 * CREATE/MODIFY/QUERY/DESTROY_EEC, QP type RD with its RDD in CreateQpIn's
 * xrcdn, the send WQE's RD segment). Minor 5: the SMA's MAD_IFC (AD-09).
 * Minor 6: SET_PORT_CAPS and SET_NODE_DESC (the guest's capability bits and
 * node description in the SMA). Minor 7: on-demand paging (issue 29: REG_MR's
 * ODP flag, MAP_ODP, UNMAP_ODP, ODP_FAULT_FAIL, the PAGE_FAULT EQE,
 * DeviceAttr's odp_caps in reserved bytes).
 */
#define VHCA_ABI_VERSION             0x00030007U
/*
 * Value of the MAGIC register: the bytes "VHCA" read as a little-endian u32,
 * so a BAR that is not ours (or all-ones after a surprise removal) is told
 * apart at once.
 */
#define VHCA_MAGIC                   0x41434856U

/* BARs and MSI-X placement. */
/*
 * BAR0: registers, the context window and the MSI-X table and PBA. Trapped:
 * every access is a vfio-user round trip (ARCHITECTURE.md §4, §5), so only
 * the control path touches it.
 */
#define VHCA_BAR0_INDEX             0U
/*
 * 64 KiB: registers below 0x1000, the context window at 0x1000, MSI-X at
 * 0x8000 and 0x9000.
 */
#define VHCA_BAR0_SIZE              0x10000U
/*
 * BAR2: doorbell pages (UARs), memfd-backed and mapped into the guest with a
 * sparse mmap, so a doorbell store never exits the VM (ARCHITECTURE.md §4).
 * 64-bit, prefetchable: it is plain memory the device polls.
 */
#define VHCA_BAR2_INDEX             2U
/*
 * BAR4: the WAKE page, 4 KiB, trapped. A 32-bit store of any value at any
 * 4-aligned offset wakes the device, like BAR0 WAKE; it holds nothing else,
 * so the kernel can map it into user contexts (BAR0 holds RESET and the
 * command queue and must stay the kernel's) and a user provider can ring WAKE
 * without a system call.
 */
#define VHCA_WAKE_BAR_INDEX         4U
/* Bytes of the WAKE page at the start of BAR4. */
#define VHCA_WAKE_BAR_SIZE          0x1000U
/*
 * Device memory (issue 29 item 2): CAP_DM_SIZE bytes at this offset of BAR4,
 * right after the WAKE page; BAR4 is the smallest power of two that holds
 * both. Memfd-backed and mapped into the guest with a sparse mmap like BAR2,
 * so the guest reads and writes it as memory (the kernel maps allocations of
 * it into user space, `ibv_alloc_dm`); the device reads and writes the same
 * bytes for an MR registered over them (REG_MR `VHCA_REG_MR_F_DM`), never
 * outside them. Zeroed by a PCI reset and when the VM goes, not by
 * DEV_CTRL.RESET. The device keeps no record of allocations: the driver
 * allocates (4 KiB granularity, so that each allocation is mapped into one
 * process only) and zeroes what it hands out.
 */
#define VHCA_DM_OFFSET              0x1000U
/* Largest CAP_DM_SIZE (64 MiB): a bound on what `--dm-size` may ask. */
#define VHCA_DM_MAX_SIZE            0x4000000U
/* MSI-X table offset in BAR0 (16 bytes per vector; QEMU emulates it). */
#define VHCA_MSIX_TABLE_OFFSET      0x8000U
/*
 * MSI-X pending-bit array offset in BAR0: 4 KiB after the table, which holds
 * the largest table (64 vectors, 1 KiB) with room to spare.
 */
#define VHCA_MSIX_PBA_OFFSET        0x9000U
/*
 * Fewest MSI-X vectors the device offers: vector 0 and at least seven
 * completion vectors.
 */
#define VHCA_MSIX_MIN_VECTORS       8U
/* Most MSI-X vectors the device offers. */
#define VHCA_MSIX_MAX_VECTORS       64U
/*
 * Vector of command completions and asynchronous events (EQ 0;
 * ARCHITECTURE.md §4).
 */
#define VHCA_MSIX_VECTOR_ASYNC      0U
/*
 * First vector for completion event queues; the rest up to CAP_MSIX_VECTORS -
 * 1 are theirs too.
 */
#define VHCA_MSIX_VECTOR_FIRST_COMP 1U

/* ============================ BAR0 registers ============================ */

/*
 * BAR0 rules. Registers are 32 bits wide at 4-byte aligned offsets; a 64-bit
 * guest-physical address is a LO/HI pair, which may also be accessed as one
 * aligned 8-byte access. Reads of unassigned offsets return 0. Writes to
 * read-only registers, to unassigned offsets, to the context window, and to
 * configuration registers (CMDQ_*, EQ0_*) while DEV_STATUS.ENABLED is set are
 * ignored and counted in IGNORED_WRITES. Every access is a vfio-user round
 * trip (~100 us as the guest sees it; ARCHITECTURE.md §5): nothing on the
 * data path reads or writes BAR0 except WAKE, and WAKE only when a doorbell
 * page says the device is asleep.
 *
 * Bring-up: write DEV_CTRL.RESET and poll DEV_STATUS until READY is set and
 * ENABLED clear; check MAGIC and ABI_VERSION; read the CAP_* registers; write
 * DRIVER_ABI, CMDQ_BASE_*, CMDQ_LOG2_SIZE, EQ0_BASE_*, EQ0_LOG2_SIZE (both
 * rings zeroed, physically contiguous, 4 KiB aligned); arm EQ 0 through its
 * doorbell slot (UAR 0, slot VHCA_UAR_EQ0_SLOT); write DEV_CTRL.ENABLE; poll
 * DEV_STATUS until ENABLED or FATAL. A FATAL device does nothing until RESET;
 * FATAL_SYNDROME says why (enum vhca_fatal).
 */

/* BAR0 register offsets. */
/* R: `VHCA_MAGIC`. */
#define VHCA_REG_MAGIC             0x0000U
/* R: `VHCA_ABI_VERSION` of the device. */
#define VHCA_REG_ABI_VERSION       0x0004U
/*
 * RW: the driver writes its `VHCA_ABI_VERSION` before ENABLE; a different
 * major, or a higher minor than the device's, makes ENABLE fail with FATAL /
 * `VHCA_FATAL_ABI_MISMATCH`.
 */
#define VHCA_REG_DRIVER_ABI        0x0008U
/* RW: `VHCA_DEV_CTRL_*` bits. */
#define VHCA_REG_DEV_CTRL          0x000cU
/* R: `VHCA_DEV_STATUS_*` bits. */
#define VHCA_REG_DEV_STATUS        0x0010U
/*
 * W: any value wakes the polling device. The driver writes it only after a
 * doorbell store when its UAR page's `asleep` word is set (see the doorbell
 * protocol), so an awake device costs no exit.
 */
#define VHCA_REG_WAKE              0x0014U
/* R: why DEV_STATUS.FATAL is set (`enum vhca_fatal`). */
#define VHCA_REG_FATAL_SYNDROME    0x0018U
/*
 * R: writes ignored since reset (read-only registers, the context window,
 * configuration while enabled).
 */
#define VHCA_REG_IGNORED_WRITES    0x001cU
/* R: QPs the device can hold, including QP 1 (GSI). */
#define VHCA_REG_CAP_MAX_QP        0x0100U
/* R: CQs. */
#define VHCA_REG_CAP_MAX_CQ        0x0104U
/* R: SRQs. */
#define VHCA_REG_CAP_MAX_SRQ       0x0108U
/* R: MRs (key index space; IBA 3.5.3: 24-bit index, MP-02). */
#define VHCA_REG_CAP_MAX_MR        0x010cU
/* R: PDs. */
#define VHCA_REG_CAP_MAX_PD        0x0110U
/* R: EQs, including EQ 0. */
#define VHCA_REG_CAP_MAX_EQ        0x0114U
/* R: work requests per SQ or RQ. */
#define VHCA_REG_CAP_MAX_QP_WR     0x0118U
/* R: SGEs per WQE. */
#define VHCA_REG_CAP_MAX_SGE       0x011cU
/* R: entries per CQ. */
#define VHCA_REG_CAP_MAX_CQE       0x0120U
/* R: bytes of inline data per send WQE. */
#define VHCA_REG_CAP_MAX_INLINE    0x0124U
/* R: UAR pages in BAR2 (BAR2 is this many 4 KiB pages). */
#define VHCA_REG_CAP_NUM_UARS      0x0128U
/* R: MSI-X vectors (`VHCA_MSIX_MIN_VECTORS`..=`VHCA_MSIX_MAX_VECTORS`). */
#define VHCA_REG_CAP_MSIX_VECTORS  0x012cU
/* R: largest CMDQ_LOG2_SIZE. */
#define VHCA_REG_CAP_MAX_CMDQ_LOG2 0x0130U
/* R: largest log2 of EQ entries (EQ 0 and CREATE_EQ). */
#define VHCA_REG_CAP_MAX_EQ_LOG2   0x0134U
/* R: work requests per SRQ. */
#define VHCA_REG_CAP_MAX_SRQ_WR    0x0138U
/* R: physical ports (1). */
#define VHCA_REG_CAP_NUM_PORTS     0x013cU
/* R: `VHCA_DEV_CAP_*` bits. */
#define VHCA_REG_CAP_FLAGS         0x0140U
/*
 * R: bytes of device memory (issue 29 item 2): BAR4 holds them at
 * `VHCA_DM_OFFSET`, a multiple of 4 KiB, at most `VHCA_DM_MAX_SIZE`; 0: the
 * device has none (a device before this register reads 0 too). REG_MR with
 * `VHCA_REG_MR_F_DM` registers a range of them.
 */
#define VHCA_REG_CAP_DM_SIZE       0x0144U
/* RW: command ring guest-physical base, low half (4 KiB aligned). */
#define VHCA_REG_CMDQ_BASE_LO      0x0200U
/* RW: command ring guest-physical base, high half. */
#define VHCA_REG_CMDQ_BASE_HI      0x0204U
/* RW: log2 of command slots (1..=CAP_MAX_CMDQ_LOG2). */
#define VHCA_REG_CMDQ_LOG2_SIZE    0x0208U
/*
 * W: producer doorbell. The driver writes its free-running producer index
 * (commands posted) after setting OWNER in every new slot.
 */
#define VHCA_REG_CMDQ_PI           0x020cU
/* R: the device's free-running consumer index (commands completed). */
#define VHCA_REG_CMDQ_CI           0x0210U
/*
 * RW: EQ 0 ring guest-physical base, low half (4 KiB aligned). EQ 0 takes
 * command-done events and every asynchronous event, on vector 0.
 */
#define VHCA_REG_EQ0_BASE_LO       0x0220U
/* RW: EQ 0 ring guest-physical base, high half. */
#define VHCA_REG_EQ0_BASE_HI       0x0224U
/* RW: log2 of EQ 0 entries (1..=CAP_MAX_EQ_LOG2). */
#define VHCA_REG_EQ0_LOG2_SIZE     0x0228U
/* RW: context table to show in the window (`enum vhca_ctx_table`). */
#define VHCA_REG_CTX_TABLE         0x0300U
/*
 * RW: object number in that table (QPN, CQN, SRQN, MR key index, EQN).
 * Writing it copies the live entry into the window (a snapshot: the entry is
 * consistent even while the device runs).
 */
#define VHCA_REG_CTX_INDEX         0x0304U
/* R: `enum vhca_ctx_status` of the last snapshot. */
#define VHCA_REG_CTX_STATUS        0x0308U
/*
 * R: the window: the snapshot record (`struct vhca_*_context`), zero past its
 * size. Read-only: writes are ignored and counted (ARCHITECTURE.md §4).
 */
#define VHCA_REG_CTX_WINDOW        0x1000U
/* Bytes in the window. */
#define VHCA_REG_CTX_WINDOW_SIZE   0x100U

/* DEV_CTRL bits. */
/*
 * Self-clearing: drop every object and every configuration register, clear
 * ENABLED and FATAL, then set READY. Also what a PCI reset does.
 */
#define VHCA_DEV_CTRL_RESET  (1U << 0)
/*
 * 1: start serving the command queue and EQ 0 as configured. 0: stop (the
 * device finishes the command it is executing, then serves nothing).
 */
#define VHCA_DEV_CTRL_ENABLE (1U << 1)

/* DEV_STATUS bits. */
/* Reset finished; registers may be configured. */
#define VHCA_DEV_STATUS_READY   (1U << 0)
/* The command queue and EQ 0 are live. */
#define VHCA_DEV_STATUS_ENABLED (1U << 1)
/*
 * The device stopped on a driver error; see FATAL_SYNDROME. Only RESET clears
 * it.
 */
#define VHCA_DEV_STATUS_FATAL   (1U << 2)

/*
 * DEV_CAP bits (CAP_FLAGS and QUERY_DEVICE's `cap_flags`): what the device
 * supports, for the driver to turn into IB device capability flags.
 */
/* Reliable Connection QPs. */
#define VHCA_DEV_CAP_RC            (1U << 0)
/* Unreliable Connection QPs. */
#define VHCA_DEV_CAP_UC            (1U << 1)
/* Unreliable Datagram QPs. */
#define VHCA_DEV_CAP_UD            (1U << 2)
/* QP 1 (GSI) through CREATE_QP with type GSI (ARCHITECTURE.md §7). */
#define VHCA_DEV_CAP_GSI           (1U << 3)
/* Shared receive queues (SR-01). */
#define VHCA_DEV_CAP_SRQ           (1U << 4)
/* ATOMIC CmpSwap and FetchAdd (OP-07). */
#define VHCA_DEV_CAP_ATOMIC        (1U << 5)
/* SEND with Invalidate (OP-03). */
#define VHCA_DEV_CAP_SEND_WITH_INV (1U << 6)
/* REG_MR with `VHCA_REG_MR_F_DMA` (an identity MR for kernel verbs). */
#define VHCA_DEV_CAP_DMA_MR        (1U << 7)
/* Memory windows of type 1 (MP-06): ALLOC_MW, BIND_MW WQEs. */
#define VHCA_DEV_CAP_MW_TYPE1      (1U << 8)
/*
 * Memory windows of type 2B (MP-07): BIND_MW, LOCAL_INV and SEND_WITH_INV.
 */
#define VHCA_DEV_CAP_MW_TYPE2      (1U << 9)
/* RESIZE_CQ (CQ-04). */
#define VHCA_DEV_CAP_RESIZE_CQ     (1U << 10)
/* RESIZE_SRQ (`ibv_modify_srq` with IBV_SRQ_MAX_WR). */
#define VHCA_DEV_CAP_RESIZE_SRQ    (1U << 11)
/* RDMA FLUSH of placement type global visibility on RC (IBA 1.5 MPE). */
#define VHCA_DEV_CAP_FLUSH_GLOBAL  (1U << 12)
/* RDMA ATOMIC WRITE on RC (IBA 1.5 MPE). */
#define VHCA_DEV_CAP_ATOMIC_WRITE  (1U << 13)
/*
 * Fast-registration MRs (MP-08; the kernel's IB_DEVICE_MEM_MGT_EXTENSIONS):
 * REG_MR with `VHCA_REG_MR_F_FAST`, REG_MR and LOCAL_INV WQEs on MR keys,
 * remote invalidation of them by SEND_WITH_INV; QUERY_DEVICE's
 * max_fast_reg_pages.
 */
#define VHCA_DEV_CAP_FAST_REG_MR   (1U << 14)
/*
 * Memory windows of type 2A (MP-07): ALLOC_MW with `VHCA_MW_TYPE2_A`, windows
 * associated with their QP alone, which DESTROY_QP refuses (BUSY) while any
 * is bound. Linux verbs have no way to ask for one (`IB_MW_TYPE_2` is type 2B
 * here), so vhca.ko does not advertise it.
 */
#define VHCA_DEV_CAP_MW_TYPE2_A    (1U << 15)
/*
 * XRC (SR-02; the kernel's IB_DEVICE_XRC): ALLOC_XRCD, XRC SRQs, XRC_INI and
 * XRC_TGT QPs.
 */
#define VHCA_DEV_CAP_XRC           (1U << 16)
/*
 * Automatic path migration (AD-10; the kernel's IB_DEVICE_AUTO_PATH_MIG and
 * IB_PORT_AUTO_MIGR_SUP): MODIFY_QP's ALT_PATH and PATH_MIG_STATE, the
 * PATH_MIG and PATH_MIG_ERR events.
 */
#define VHCA_DEV_CAP_APM           (1U << 17)

/* FATAL_SYNDROME values. */
enum vhca_fatal {
	/* Not fatal. */
	VHCA_FATAL_NONE = 0,
	/* DRIVER_ABI is not compatible with ABI_VERSION. */
	VHCA_FATAL_ABI_MISMATCH = 1,
	/*
	 * CMDQ_BASE or CMDQ_LOG2_SIZE is invalid (unaligned, too big, unmapped).
	 */
	VHCA_FATAL_CMDQ_BAD_CONFIG = 2,
	/*
	 * A slot between CMDQ_CI and CMDQ_PI was not owned by the device: the queue
	 * stops, since the device cannot tell where commands are.
	 */
	VHCA_FATAL_CMDQ_NOT_OWNED = 3,
	/* EQ0_BASE or EQ0_LOG2_SIZE is invalid. */
	VHCA_FATAL_EQ0_BAD_CONFIG = 4,
	/*
	 * EQ 0 overflowed: the driver did not advance its consumer index. An event
	 * (a command completion, a QP error) would be lost, and no other queue could
	 * report that, so the device stops (as a CQ overflow is an error, CQ-03).
	 */
	VHCA_FATAL_EQ0_OVERFLOW = 5,
	/* UAR 0 (EQ 0's doorbell slot) is not readable. */
	VHCA_FATAL_UAR0_UNAVAILABLE = 6,
	/*
	 * The device hit an internal error (a bug) and stopped every queue; a
	 * DEVICE_FATAL event went to EQ 0. RESET brings it back, empty.
	 */
	VHCA_FATAL_INTERNAL = 7,
};

/*
 * CTX_TABLE values: which device-resident context table the window shows.
 */
enum vhca_ctx_table {
	/* Nothing selected. */
	VHCA_CTX_NONE = 0,
	/* QP contexts, by QPN (`struct vhca_qp_context`). */
	VHCA_CTX_QPC = 1,
	/* CQ contexts, by CQN (`struct vhca_cq_context`). */
	VHCA_CTX_CQC = 2,
	/* SRQ contexts, by SRQN (`struct vhca_srq_context`). */
	VHCA_CTX_SRQC = 3,
	/*
	 * Memory protection table, by MR key index = key >> 8 (`struct
	 * vhca_mr_context`).
	 */
	VHCA_CTX_MPT = 4,
	/* EQ contexts, by EQN (`struct vhca_eq_context`). */
	VHCA_CTX_EQC = 5,
};

/* CTX_STATUS values. */
enum vhca_ctx_status {
	/* The window holds the entry. */
	VHCA_CTX_STATUS_OK = 0,
	/* No live object has that number; the window reads as zeros. */
	VHCA_CTX_STATUS_NO_OBJECT = 1,
	/* CTX_TABLE is not a table; the window reads as zeros. */
	VHCA_CTX_STATUS_BAD_TABLE = 2,
};

/* ====================== BAR2 doorbell pages (UARs) ====================== */

/*
 * Doorbell pages (BAR2). Page u is bytes [u * 4096, (u + 1) * 4096) of BAR2.
 * UAR 0 belongs to the kernel driver (its QPs and CQs, and every EQ); the
 * driver hands pages 1.. to user contexts, one each, to mmap. A page holds a
 * 64-byte header (struct vhca_uar_header) written by the device, then the
 * 64-byte doorbell summary (struct vhca_uar_summary) written by producers and
 * taken by the device, then 8-byte doorbell slots: slot s is at byte s * 8,
 * for s in VHCA_UAR_FIRST_SLOT..VHCA_UAR_SLOTS. The header keeps the line the
 * device writes apart from the lines the driver writes. The driver picks a
 * free (page, slot) for each QP, SRQ, CQ and EQ and passes it to the create
 * command; the device refuses a slot already in use (VHCA_STATUS_BUSY) or out
 * of range, and slot VHCA_UAR_EQ0_SLOT of UAR 0, which is EQ 0's. The slot is
 * the object's until it is destroyed.
 *
 * Slots hold free-running 32-bit indices: a producer index counts WQEs ever
 * posted, a consumer index entries ever consumed; ring entry = index mod ring
 * size. The driver stores each 32-bit word with one aligned store.
 *
 * Producer slots (QP: sq_pi, rq_pi; SRQ: pi) tell the device about new work,
 * so they need the summary and the wake protocol; a CQ's arm word needs the
 * summary only (see Arming). The summary is a 512-bit little-endian bitmap,
 * one bit per slot of its page: slot s is bit s % 32 of summary word s / 32
 * (bit s % 8 of byte s / 8, so a bitmap of 64-bit words numbers the bits the
 * same). The device reads QP, SRQ and CQ slots only where a summary bit sends
 * it: a producer index or arm word stored without its bit is not seen (until
 * the bit of the same slot is set again).
 *
 * Driver: write the WQE; store the new producer index; set the slot's summary
 * bit with an atomic OR (a locked read-modify-write: other producers of the
 * page and the device write the same words), ordered after the index store;
 * full fence (smp_mb / atomic_thread_fence(seq_cst): the index and the bit
 * must be visible before the load below); load the page's asleep word; if it
 * is nonzero, write BAR0 WAKE (kernel) or the WAKE page, BAR4 (user contexts,
 * which the kernel maps it into).
 *
 * Device: each round, for every page holding a QP's, SRQ's or CQ's slot, it
 * loads the summary words, takes each nonzero one with an atomic swap to
 * zero, then loads the producer slots whose bits it took (an index stored
 * before a bit is therefore seen by the load that follows the swap taking
 * that bit; a bit set after the swap stays for the next round). To sleep:
 * store asleep = 1 in every UAR page in use; full fence; load the summaries
 * again; if a bit is set, store asleep = 0 and go on polling, else sleep
 * until WAKE (or a packet or timer). On waking it stores asleep = 0 before
 * scanning.
 *
 * Either the driver's load sees asleep = 1 and it rings WAKE, or the device's
 * rescan sees the summary bit (Dekker: each side stores, fences, then loads
 * the other's word; the driver's stores are the index and the bit), so work
 * is never left unseen; an awake device costs the driver no exit. A spurious
 * WAKE is harmless.
 *
 * A summary bit is a hint, never trusted: a bit for a free slot, an EQ's
 * slot, or a slot whose word did not move costs the device one slot read and
 * is dropped; a bit of a page with no QP, SRQ or CQ is not even read. A
 * page's summary is written only by the holder of that page (a user context
 * mmaps its own page alone), so a guest process that sets or clears bits, or
 * never sets them, affects only its own queues: those it leaves unflagged
 * starve, nobody else's. The device keeps no cross-page summary a context
 * could write.
 *
 * Consumer and arm slots (CQ: ci, arm; EQ: ci, arm) need no WAKE: the device
 * reads a consumer index only when it is about to write a CQE or EQE, a CQ's
 * arm word when it takes the slot's summary bit (in a round, before it writes
 * that round's CQEs), and an EQ's arm word when it raises interrupts; it is
 * awake then.
 *
 * Arming: a CQ's arm word is (sequence number, 31 bits) |
 * VHCA_CQ_ARM_SOLICITED. The driver arms by storing a word different from the
 * last (increment the sequence number), then setting the slot's summary bit
 * (atomic OR, ordered after the store; no fence or WAKE); the device takes a
 * changed word as one request for an event on the next completion (or next
 * solicited one, or an error), as ibv_req_notify_cq. If the CQ holds CQEs the
 * driver has not consumed (pi != the slot's ci) when the device sees the
 * changed word, the event is raised at once, so arm-then-poll never misses a
 * CQE that landed in between (a spurious event costs the driver one empty
 * poll). The arm word found in the slot at CREATE_CQ is the baseline, not a
 * request. An EQ's arm word is a sequence number: a changed word lets the
 * device raise the EQ's vector once more, at once if EQEs are waiting (pi !=
 * ci), else after the next EQE; the word found at CREATE_EQ is the baseline
 * (EQ 0: zero, so an arm stored before ENABLE counts). After an interrupt the
 * driver consumes the EQEs, stores ci, then stores a new arm word. The device
 * never interprets a WQE's wr_id: it returns it in the CQE as is, so a driver
 * may keep its own ring index there.
 */

/* Doorbell page geometry. */
/* Bytes per UAR page: one x86 page, so each can be mmapped on its own. */
#define VHCA_UAR_PAGE_SIZE      4096U
/*
 * Bytes of the device-written header at the start of every page (one cache
 * line).
 */
#define VHCA_UAR_HEADER_SIZE    64U
/*
 * Byte offset of the doorbell summary (struct vhca_uar_summary) in a page.
 */
#define VHCA_UAR_SUMMARY_OFFSET 64U
/* Bytes of the summary: one bit per slot of the page. */
#define VHCA_UAR_SUMMARY_SIZE   64U
/* Bytes per doorbell slot (two 32-bit words). */
#define VHCA_UAR_SLOT_SIZE      8U
/* First slot number (slots below it are the header and the summary). */
#define VHCA_UAR_FIRST_SLOT     16U
/*
 * Slots per page, header included: valid slot numbers are FIRST_SLOT..SLOTS.
 */
#define VHCA_UAR_SLOTS          512U
/* The kernel driver's page. */
#define VHCA_UAR_KERNEL_UAR     0U
/* EQ 0's doorbell slot (struct vhca_eq_doorbell) in UAR 0; reserved. */
#define VHCA_UAR_EQ0_SLOT       16U
/* Value of `asleep` while the device polls. */
#define VHCA_UAR_AWAKE          0U
/*
 * Value of `asleep` while the device sleeps: ring WAKE after a doorbell.
 */
#define VHCA_UAR_ASLEEP         1U

/* CQ arm word bits (struct vhca_cq_doorbell `arm`). */
/*
 * Event only for a solicited completion (or an error); clear: for the next
 * completion (CQ-02). Arming for "next" after "solicited" widens the request,
 * never narrows it.
 */
#define VHCA_CQ_ARM_SOLICITED (1U << 31)
/* Sequence number bits: change them to make a new request. */
#define VHCA_CQ_ARM_SN_MASK   0x7fffffffU

/*
 * The first 64 bytes of every doorbell page: written by the device only.
 */
struct vhca_uar_header {
	/* `VHCA_UAR_ASLEEP` while the device sleeps, else `VHCA_UAR_AWAKE`. */
	__u32 asleep;
	/* Zero. */
	__u32 rsvd[15];
};
_Static_assert(sizeof(struct vhca_uar_header) == 64, "vhca_uar_header: size");
_Static_assert(offsetof(struct vhca_uar_header, asleep) == 0, "vhca_uar_header.asleep");
_Static_assert(offsetof(struct vhca_uar_header, rsvd) == 4, "vhca_uar_header.rsvd");

/*
 * The doorbell summary, bytes 64..128 of every page: bit s (bit s % 32 of
 * `bits[s / 32]`) says slot s's producer index may have moved. Producers set
 * bits with an atomic OR; the device takes a word with an atomic swap to zero
 * (ARCHITECTURE.md §2, §4).
 */
struct vhca_uar_summary {
	/* One bit per slot; bits below `VHCA_UAR_FIRST_SLOT` are ignored. */
	__u32 bits[16];
};
_Static_assert(sizeof(struct vhca_uar_summary) == 64, "vhca_uar_summary: size");
_Static_assert(offsetof(struct vhca_uar_summary, bits) == 0, "vhca_uar_summary.bits");

/* A QP's doorbell slot, written by the driver. */
struct vhca_qp_doorbell {
	/* Send WQEs ever posted (free-running). */
	__u32 sq_pi;
	/* Receive WQEs ever posted (free-running); unused with an SRQ. */
	__u32 rq_pi;
};
_Static_assert(sizeof(struct vhca_qp_doorbell) == 8, "vhca_qp_doorbell: size");
_Static_assert(offsetof(struct vhca_qp_doorbell, sq_pi) == 0, "vhca_qp_doorbell.sq_pi");
_Static_assert(offsetof(struct vhca_qp_doorbell, rq_pi) == 4, "vhca_qp_doorbell.rq_pi");

/* An SRQ's doorbell slot, written by the driver. */
struct vhca_srq_doorbell {
	/* Receive WQEs ever posted (free-running). */
	__u32 pi;
	/* Zero. */
	__u32 rsvd;
};
_Static_assert(sizeof(struct vhca_srq_doorbell) == 8, "vhca_srq_doorbell: size");
_Static_assert(offsetof(struct vhca_srq_doorbell, pi) == 0, "vhca_srq_doorbell.pi");
_Static_assert(offsetof(struct vhca_srq_doorbell, rsvd) == 4, "vhca_srq_doorbell.rsvd");

/* A CQ's doorbell slot, written by the driver. */
struct vhca_cq_doorbell {
	/*
	 * CQEs ever consumed (free-running): the device never writes more than the
	 * ring size past it; a CQE that does not fit is a CQ overflow (CQ-03).
	 */
	__u32 ci;
	/* Arm word: `VHCA_CQ_ARM_*`. */
	__u32 arm;
};
_Static_assert(sizeof(struct vhca_cq_doorbell) == 8, "vhca_cq_doorbell: size");
_Static_assert(offsetof(struct vhca_cq_doorbell, ci) == 0, "vhca_cq_doorbell.ci");
_Static_assert(offsetof(struct vhca_cq_doorbell, arm) == 4, "vhca_cq_doorbell.arm");

/* An EQ's doorbell slot (always in UAR 0), written by the driver. */
struct vhca_eq_doorbell {
	/* EQEs ever consumed (free-running). */
	__u32 ci;
	/* Arm sequence number: a new value allows one more interrupt. */
	__u32 arm;
};
_Static_assert(sizeof(struct vhca_eq_doorbell) == 8, "vhca_eq_doorbell: size");
_Static_assert(offsetof(struct vhca_eq_doorbell, ci) == 0, "vhca_eq_doorbell.ci");
_Static_assert(offsetof(struct vhca_eq_doorbell, arm) == 4, "vhca_eq_doorbell.arm");

/* ===================== Numbers shared with ibverbs ====================== */

/*
 * QP service (the kernel's `enum ib_qp_type`, which has GSI; ibverbs' RC, UC
 * and UD have the same numbers).
 */
enum vhca_qp_type {
	/*
	 * QP 0, subnet management (AD-09): not supported, CREATE_QP answers
	 * `VHCA_STATUS_NOT_SUPPORTED`.
	 */
	VHCA_QPT_SMI = 0,
	/*
	 * QP 1, general services: a UD QP with the well-known Q_Key 0x80010000
	 * (PV-05); the device gives it QPN 1 (ARCHITECTURE.md §7).
	 */
	VHCA_QPT_GSI = 1,
	/* Reliable Connection. */
	VHCA_QPT_RC = 2,
	/* Unreliable Connection. */
	VHCA_QPT_UC = 3,
	/* Unreliable Datagram. */
	VHCA_QPT_UD = 4,
	/*
	 * XRC initiator (SR-02): sends only; each send WQE names the target's XRC
	 * SRQ (`struct vhca_xrc_seg`). No RQ, no SRQ; recv_cqn as send_cqn.
	 */
	VHCA_QPT_XRC_INI = 9,
	/*
	 * XRC target (SR-02): receives only, into the XRC SRQ each request names
	 * (PV-08); no rings, doorbell slot, PD or CQ: CREATE_QP reads only `xrcdn`
	 * and `port`.
	 */
	VHCA_QPT_XRC_TGT = 10,
	/*
	 * Reliable Datagram (AD-11; no `ibv_qp_type` number: Linux verbs have no
	 * RD): in the RD domain CREATE_QP names in `xrcdn`; each send WQE names its
	 * EE context, destination QP and Q_Key (`struct vhca_rd_seg`); SEND, RDMA
	 * WRITE (with immediate), RDMA READ and the ATOMICs. MODIFY_QP takes the
	 * state, Q_Key and access flags only (the path, PSNs and timers are the EE
	 * context's, MODIFY_EEC).
	 */
	VHCA_QPT_RD = 11,
};

/* SRQ types (`enum ibv_srq_type`). */
enum vhca_srq_type {
	/* An SRQ QPs of its PD name at creation (SR-01). */
	VHCA_SRQT_BASIC = 0,
	/*
	 * An XRC SRQ (SR-02): in an XRC domain, with its own CQ; XRC TGT QPs of that
	 * domain receive into it.
	 */
	VHCA_SRQT_XRC = 1,
};

/* QP states (`enum ibv_qp_state`; IBA 10.3.1, QS-01). */
enum vhca_qp_state {
	VHCA_QPS_RESET = 0,
	VHCA_QPS_INIT = 1,
	VHCA_QPS_RTR = 2,
	VHCA_QPS_RTS = 3,
	VHCA_QPS_SQD = 4,
	VHCA_QPS_SQE = 5,
	VHCA_QPS_ERROR = 6,
};

/* Path MTU (`enum ibv_mtu`; IBA 7.7.8, AD-03). */
enum vhca_mtu {
	VHCA_MTU_M256 = 1,
	VHCA_MTU_M512 = 2,
	VHCA_MTU_M1024 = 3,
	VHCA_MTU_M2048 = 4,
	VHCA_MTU_M4096 = 5,
};

/*
 * Send work request opcodes (`enum ibv_wr_opcode`), the ones the engine runs.
 */
enum vhca_wr_opcode {
	VHCA_WR_RDMA_WRITE = 0,
	VHCA_WR_RDMA_WRITE_WITH_IMM = 1,
	VHCA_WR_SEND = 2,
	VHCA_WR_SEND_WITH_IMM = 3,
	VHCA_WR_RDMA_READ = 4,
	VHCA_WR_ATOMIC_CMP_SWAP = 5,
	VHCA_WR_ATOMIC_FETCH_ADD = 6,
	/*
	 * Invalidate the R_Key ctrl.imm_or_inv: a type 2 memory window's (MP-07) or
	 * a fast-registration MR's (MP-08).
	 */
	VHCA_WR_LOCAL_INV = 7,
	/* Bind a memory window (MP-06, MP-07): ctrl + `struct vhca_bind_seg`. */
	VHCA_WR_BIND_MW = 8,
	VHCA_WR_SEND_WITH_INV = 9,
	/*
	 * RDMA FLUSH (IBA 1.5 MPE; RC): ctrl.imm_or_inv = placement type
	 * (`VHCA_FLUSH_GLOBAL`) | selectivity level << 4 (`VHCA_FLUSH_LEVEL_*`),
	 * then `struct vhca_raddr_seg` and `struct vhca_atomic_seg` whose
	 * compare_add is the length; ctrl.len = 0.
	 */
	VHCA_WR_FLUSH = 14,
	/*
	 * RDMA ATOMIC WRITE (IBA 1.5 MPE; RC): `struct vhca_raddr_seg`, then `struct
	 * vhca_atomic_seg` whose compare_add holds the 8 bytes to write (copied as
	 * they are); ctrl.len = 0.
	 */
	VHCA_WR_ATOMIC_WRITE = 15,
	/*
	 * Fast registration of an MR allocated with `VHCA_REG_MR_F_FAST` (MP-08; the
	 * kernel's IB_WR_REG_MR): ctrl.imm_or_inv = the MR's new key, then `struct
	 * vhca_reg_mr_seg`; ctrl.len = 0.
	 */
	VHCA_WR_REG_MR = 32,
};

/* Completion status (`enum ibv_wc_status`). */
enum vhca_wc_status {
	VHCA_WC_SUCCESS = 0,
	VHCA_WC_LOC_LEN_ERR = 1,
	VHCA_WC_LOC_QP_OP_ERR = 2,
	VHCA_WC_LOC_EEC_OP_ERR = 3,
	VHCA_WC_LOC_PROT_ERR = 4,
	VHCA_WC_WR_FLUSH_ERR = 5,
	VHCA_WC_MW_BIND_ERR = 6,
	VHCA_WC_BAD_RESP_ERR = 7,
	VHCA_WC_LOC_ACCESS_ERR = 8,
	VHCA_WC_REM_INV_REQ_ERR = 9,
	VHCA_WC_REM_ACCESS_ERR = 10,
	VHCA_WC_REM_OP_ERR = 11,
	VHCA_WC_RETRY_EXC_ERR = 12,
	VHCA_WC_RNR_RETRY_EXC_ERR = 13,
	VHCA_WC_LOC_RDD_VIOL_ERR = 14,
	VHCA_WC_REM_INV_RD_REQ_ERR = 15,
	VHCA_WC_REM_ABORT_ERR = 16,
	VHCA_WC_INV_EECN_ERR = 17,
	VHCA_WC_INV_EEC_STATE_ERR = 18,
	VHCA_WC_FATAL_ERR = 19,
	VHCA_WC_RESP_TIMEOUT_ERR = 20,
	VHCA_WC_GENERAL_ERR = 21,
};

/* Completion opcode (`enum ibv_wc_opcode`). */
enum vhca_wc_opcode {
	VHCA_WC_OP_SEND = 0,
	VHCA_WC_OP_RDMA_WRITE = 1,
	VHCA_WC_OP_RDMA_READ = 2,
	VHCA_WC_OP_COMP_SWAP = 3,
	VHCA_WC_OP_FETCH_ADD = 4,
	VHCA_WC_OP_BIND_MW = 5,
	VHCA_WC_OP_LOCAL_INV = 6,
	VHCA_WC_OP_FLUSH = 8,
	VHCA_WC_OP_ATOMIC_WRITE = 9,
	/* A fast registration (MP-08; the kernel's IB_WC_REG_MR). */
	VHCA_WC_OP_REG_MR = 10,
	VHCA_WC_OP_RECV = 128,
	VHCA_WC_OP_RECV_RDMA_WITH_IMM = 129,
};

/* Port state (`enum ibv_port_state`). */
enum vhca_port_state {
	VHCA_PORT_NOP = 0,
	VHCA_PORT_DOWN = 1,
	VHCA_PORT_INIT = 2,
	VHCA_PORT_ARMED = 3,
	VHCA_PORT_ACTIVE = 4,
	VHCA_PORT_ACTIVE_DEFER = 5,
};

/*
 * Atomic capability (`enum ibv_atomic_cap`; OP-13: GLOB only if atomics are
 * atomic against the guest's CPUs too).
 */
enum vhca_atomic_cap {
	VHCA_ATOMIC_NONE = 0,
	VHCA_ATOMIC_HCA = 1,
	VHCA_ATOMIC_GLOB = 2,
};

/* Memory access flags (`enum ibv_access_flags` bits; MP-04). */
#define VHCA_ACCESS_LOCAL_WRITE      (1U << 0)
#define VHCA_ACCESS_REMOTE_WRITE     (1U << 1)
#define VHCA_ACCESS_REMOTE_READ      (1U << 2)
#define VHCA_ACCESS_REMOTE_ATOMIC    (1U << 3)
#define VHCA_ACCESS_MW_BIND          (1U << 4)
/*
 * The MR may be the target of a FLUSH of placement type global visibility
 * (IBA 1.5 MPE).
 */
#define VHCA_ACCESS_FLUSH_GLOBAL     (1U << 8)
/*
 * Placement type persistence: never granted; guest memory is not
 * non-volatile, so REG_MR refuses it (VHCA_STATUS_BAD_PARAM).
 */
#define VHCA_ACCESS_FLUSH_PERSISTENT (1U << 9)

/*
 * FLUSH placement types and selectivity levels (`enum ib_placement_type`,
 * `enum ib_selectivity_level`), as FETH carries them.
 */
/* Placement type: global visibility. */
#define VHCA_FLUSH_GLOBAL      (1U << 0)
/* Placement type: persistence (never succeeds on this device). */
#define VHCA_FLUSH_PERSISTENT  (1U << 1)
/* Selectivity: the range [remote_addr, remote_addr + length). */
#define VHCA_FLUSH_LEVEL_RANGE 0U
/* Selectivity: the whole memory region of the R_Key. */
#define VHCA_FLUSH_LEVEL_MR    1U

/* Send WQE flags (`enum ibv_send_flags` bits). */
/* Wait for prior READ/ATOMIC to complete first (C9-31, OR-05). */
#define VHCA_SEND_FENCE     (1 << 0)
/* Write a CQE on success (OR-06). */
#define VHCA_SEND_SIGNALED  (1 << 1)
/* Set the solicited-event bit (OP-10). */
#define VHCA_SEND_SOLICITED (1 << 2)
/* The data follows the headers in the WQE (`len` bytes), not SGEs. */
#define VHCA_SEND_INLINE    (1 << 3)

/* Completion flags (`enum ibv_wc_flags` bits). */
/* UD: the receive buffer starts with the 40-byte GRH. */
#define VHCA_WC_FLAG_GRH                   (1U << 0)
/* `imm_or_inv` holds immediate data. */
#define VHCA_WC_FLAG_WITH_IMM              (1U << 1)
/* `imm_or_inv` holds the R_Key the SEND invalidated. */
#define VHCA_WC_FLAG_WITH_INV              (1U << 3)
/*
 * RoCE receives: `smac` holds the sender's MAC (kernel `IB_WC_WITH_SMAC`).
 */
#define VHCA_WC_FLAG_WITH_SMAC             (1U << 4)
/*
 * RoCE receives: `network_hdr_type` says what the 40-byte header space holds
 * (kernel `IB_WC_WITH_NETWORK_HDR_TYPE`).
 */
#define VHCA_WC_FLAG_WITH_NETWORK_HDR_TYPE (1U << 6)

/*
 * QP attribute mask (`enum ibv_qp_attr_mask` bits) of MODIFY_QP; the device
 * checks it against the transition table (QS-02) and refuses CAP with
 * `VHCA_STATUS_NOT_SUPPORTED`. ALT_PATH reads `ModifyQpIn::alt` (AD-10).
 */
#define VHCA_QP_ATTR_STATE               (1U << 0)
#define VHCA_QP_ATTR_CUR_STATE           (1U << 1)
#define VHCA_QP_ATTR_EN_SQD_ASYNC_NOTIFY (1U << 2)
#define VHCA_QP_ATTR_ACCESS_FLAGS        (1U << 3)
#define VHCA_QP_ATTR_PKEY_INDEX          (1U << 4)
#define VHCA_QP_ATTR_PORT                (1U << 5)
#define VHCA_QP_ATTR_QKEY                (1U << 6)
#define VHCA_QP_ATTR_AV                  (1U << 7)
#define VHCA_QP_ATTR_PATH_MTU            (1U << 8)
#define VHCA_QP_ATTR_TIMEOUT             (1U << 9)
#define VHCA_QP_ATTR_RETRY_CNT           (1U << 10)
#define VHCA_QP_ATTR_RNR_RETRY           (1U << 11)
#define VHCA_QP_ATTR_RQ_PSN              (1U << 12)
#define VHCA_QP_ATTR_MAX_QP_RD_ATOMIC    (1U << 13)
#define VHCA_QP_ATTR_ALT_PATH            (1U << 14)
#define VHCA_QP_ATTR_MIN_RNR_TIMER       (1U << 15)
#define VHCA_QP_ATTR_SQ_PSN              (1U << 16)
#define VHCA_QP_ATTR_MAX_DEST_RD_ATOMIC  (1U << 17)
#define VHCA_QP_ATTR_PATH_MIG_STATE      (1U << 18)
#define VHCA_QP_ATTR_CAP                 (1U << 19)
#define VHCA_QP_ATTR_DEST_QPN            (1U << 20)

/* SRQ attribute mask (`enum ibv_srq_attr_mask` bits) of MODIFY_SRQ. */
/*
 * Resize: not through MODIFY_SRQ (`VHCA_STATUS_NOT_SUPPORTED`); the driver
 * uses RESIZE_SRQ, which takes the new ring.
 */
#define VHCA_SRQ_ATTR_MAX_WR (1U << 0)
/*
 * Set and arm the limit: one SRQ_LIMIT_REACHED event when fewer WQEs remain,
 * then the limit is 0 again (SR-01).
 */
#define VHCA_SRQ_ATTR_LIMIT  (1U << 1)

/* Special object numbers. */
/*
 * "No SRQ" in CREATE_QP, and no object: PDNs, CQNs, SRQNs, QPNs of created
 * QPs (except GSI, 1) and EQNs of created EQs are never 0.
 */
#define VHCA_NONE      0U
/* The asynchronous EQ (configured through BAR0, not CREATE_EQ). */
#define VHCA_ASYNC_EQN 0U
/* QPN of the GSI QP. */
#define VHCA_GSI_QPN   1U
/* The only port. */
#define VHCA_PORT      1U

/* ============================ Command queue ============================= */

/*
 * Command queue. The ring is 2^CMDQ_LOG2_SIZE slots of struct vhca_cmd,
 * physically contiguous and 4 KiB aligned (BAR0 CMDQ_*). To post, the driver
 * fills the slot at its producer index mod ring size with owner = 0, sets
 * owner = VHCA_CMD_OWNER_DEVICE last (after a write barrier), and writes the
 * new free-running producer index to CMDQ_PI. The device executes commands
 * strictly in order, one at a time; for each it writes the outputs (inline
 * into `data`, or into the output mailbox), `syndrome` and `status`, then
 * clears owner (release ordering: everything written before owner reads as
 * written once owner reads 0), advances CMDQ_CI, and, if the command has
 * VHCA_CMD_F_EVENT, writes an EQE of type VHCA_EQE_COMMAND_DONE (object =
 * token, data = status) to EQ 0 and signals vector 0. A slot the device
 * should execute but does not own stops the queue (DEV_STATUS.FATAL,
 * VHCA_FATAL_CMDQ_NOT_OWNED).
 *
 * Parameters: each opcode has an input and an output struct (or none). A
 * struct of at most VHCA_CMD_INLINE_SIZE bytes travels inline in `data`
 * (input there, zero-padded; output written over it); a larger one in a
 * mailbox: a guest-physical buffer of at most VHCA_CMD_MAILBOX_MAX bytes that
 * does not cross a 4 KiB page, named by in_mailbox/in_len or
 * out_mailbox/out_len; a length must be at least the struct's size, and the
 * device reads or writes exactly the struct's size.
 *
 * All or nothing: a command either succeeds completely or fails with nothing
 * changed (QS-02, QS-09): no object is created, modified or destroyed in
 * part, and on failure no output is written. Ring and page-list addresses are
 * checked against the guest's memory map before anything changes
 * (VHCA_STATUS_BAD_ADDRESS). The device also checks that every object number
 * belongs to the kind expected (a CQN where a CQ is needed).
 */

/*
 * Resizing a CQ or an SRQ (RESIZE_CQ, RESIZE_SRQ). The device does the copy,
 * at the moment it executes the command (commands and the data path never run
 * at the same time, so that is a single point in the stream of CQEs and
 * WQEs): before it, every CQE goes to the old ring and every WQE is read from
 * the old ring; after it, only the new ring is used. Free-running indices
 * carry on unchanged (the CQ's pi and the ci in its doorbell slot; the SRQ's
 * pi and the device's fetch index), only the ring size changes, so entry k
 * lives in slot k mod the new size from then on.
 *
 * RESIZE_CQ: the device reads ci from the CQ's doorbell slot; the driver
 * stores its consumer index there before the command and consumes nothing
 * from the command until it has switched to the new ring (it may hold its CQ
 * lock across the command; a consumer that does poll the old ring meanwhile
 * is harmless: it only sees entries the device copied, at the same indices).
 * The CQEs written and not consumed, [ci, pi), plus those the device holds
 * and has not written yet, must fit the new ring, else BAD_PARAM (EINVAL) and
 * nothing changes. The device copies [ci, pi) into the new ring at the same
 * indices, each with the owner bit of its index in the new ring, and writes
 * into every other slot an owner byte that does not match the next index to
 * land there (the rest of such a slot is undefined). So the driver need not
 * zero the new ring, and after the command it only swaps its ring pointer and
 * size, keeping ci; the old ring is free. An overflowed CQ (CQ-03) cannot be
 * resized (BAD_STATE). Arming is unchanged.
 *
 * RESIZE_SRQ: the driver posts nothing from the command until it has
 * switched. The WQEs posted and not yet fetched by the device, [fetched, pi)
 * with pi read from the SRQ's doorbell slot, are copied into the new ring at
 * the same indices; WQEs already fetched live in the device. The stride
 * stays. The new size must hold max_wr, and every WQE posted and not consumed
 * (fetched or not), else BAD_PARAM; growing is always possible up to the
 * device's max_srq_wr (beyond: LIMIT_EXCEEDED). The armed limit is unchanged.
 * The driver must still not post more than the new size past the oldest WQE
 * whose receive completion it has not seen.
 */

/* Command queue constants. */
/* Bytes per command slot: one cache line, as erdma's command SQE. */
#define VHCA_CMD_SLOT_SIZE   64U
/* Bytes of inline parameters in a slot (`data`). */
#define VHCA_CMD_INLINE_SIZE 32U
/* Largest mailbox: one 4 KiB page, so it is always one DMA page. */
#define VHCA_CMD_MAILBOX_MAX 4096U

/* Command `flags` bits. */
/*
 * Post an EQE of type COMMAND_DONE on EQ 0 when the command completes, so the
 * driver can sleep instead of polling `owner`.
 */
#define VHCA_CMD_F_EVENT (1 << 0)

/* Command `owner` bits. */
/*
 * Set by the driver last when posting; cleared by the device last when the
 * command is complete.
 */
#define VHCA_CMD_OWNER_DEVICE (1 << 0)

/* One command slot. */
struct vhca_cmd {
	/* `enum vhca_opcode`. */
	__u16 opcode;
	/* Driver's cookie, echoed in the COMMAND_DONE event. */
	__u16 token;
	/* `VHCA_CMD_F_*`. */
	__u8 flags;
	/* Device-written: `enum vhca_status`. */
	__u8 status;
	/* `VHCA_CMD_OWNER_*`. */
	__u8 owner;
	/* Zero. */
	__u8 rsvd0;
	/*
	 * Device-written: which check failed, for the driver's log (0 on success;
	 * device-specific, not ABI).
	 */
	__u32 syndrome;
	/* Bytes of the input mailbox (0 if none). */
	__u16 in_len;
	/* Bytes of the output mailbox (0 if none). */
	__u16 out_len;
	/* Guest-physical address of the input mailbox. */
	__u64 in_mailbox;
	/* Guest-physical address of the output mailbox. */
	__u64 out_mailbox;
	/* Inline input, then inline output. */
	__u8 data[32];
};
_Static_assert(sizeof(struct vhca_cmd) == 64, "vhca_cmd: size");
_Static_assert(offsetof(struct vhca_cmd, opcode) == 0, "vhca_cmd.opcode");
_Static_assert(offsetof(struct vhca_cmd, token) == 2, "vhca_cmd.token");
_Static_assert(offsetof(struct vhca_cmd, flags) == 4, "vhca_cmd.flags");
_Static_assert(offsetof(struct vhca_cmd, status) == 5, "vhca_cmd.status");
_Static_assert(offsetof(struct vhca_cmd, owner) == 6, "vhca_cmd.owner");
_Static_assert(offsetof(struct vhca_cmd, rsvd0) == 7, "vhca_cmd.rsvd0");
_Static_assert(offsetof(struct vhca_cmd, syndrome) == 8, "vhca_cmd.syndrome");
_Static_assert(offsetof(struct vhca_cmd, in_len) == 12, "vhca_cmd.in_len");
_Static_assert(offsetof(struct vhca_cmd, out_len) == 14, "vhca_cmd.out_len");
_Static_assert(offsetof(struct vhca_cmd, in_mailbox) == 16, "vhca_cmd.in_mailbox");
_Static_assert(offsetof(struct vhca_cmd, out_mailbox) == 24, "vhca_cmd.out_mailbox");
_Static_assert(offsetof(struct vhca_cmd, data) == 32, "vhca_cmd.data");

/*
 * Command completion status. Each maps to one errno (`vhca_status_errno`).
 */
enum vhca_status {
	/* Done. */
	VHCA_STATUS_OK = 0,
	/* Unknown opcode. */
	VHCA_STATUS_BAD_OPCODE = 1,
	/*
	 * A parameter is out of range or inconsistent (reserved bits, a ring smaller
	 * than its WQE count, a bad page list).
	 */
	VHCA_STATUS_BAD_PARAM = 2,
	/*
	 * Not allowed in the object's current state (QP transition or attribute
	 * mask, QS-02).
	 */
	VHCA_STATUS_BAD_STATE = 3,
	/* No room for another object of this kind. */
	VHCA_STATUS_NO_RESOURCES = 4,
	/* No live object has this number. */
	VHCA_STATUS_NOT_FOUND = 5,
	/* The PD does not exist (QS-09). */
	VHCA_STATUS_BAD_PD = 6,
	/* A CQ does not exist (QS-09). */
	VHCA_STATUS_BAD_CQ = 7,
	/* The SRQ does not exist. */
	VHCA_STATUS_BAD_SRQ = 8,
	/* More WRs or SGEs than the device supports (QS-09 "caps exceeded"). */
	VHCA_STATUS_LIMIT_EXCEEDED = 9,
	/*
	 * The object is in use (a PD with MRs, a CQ with QPs; a doorbell slot
	 * already taken).
	 */
	VHCA_STATUS_BUSY = 10,
	/* A valid request the device does not implement. */
	VHCA_STATUS_NOT_SUPPORTED = 11,
	/* Not allowed (e.g. the reserved doorbell slot of EQ 0). */
	VHCA_STATUS_PERMISSION = 12,
	/* A mailbox, ring or page-list address is outside the guest's memory. */
	VHCA_STATUS_BAD_ADDRESS = 13,
	/* Transient: try again (the device is resetting). */
	VHCA_STATUS_AGAIN = 14,
};

/*
 * Command opcodes. Numbers are grouped by object kind; 0 is invalid, so a
 * zeroed slot is never a command.
 */
enum vhca_opcode {
	/* Does nothing; tests the queue at probe. */
	VHCA_CMD_NOP = 0x0001,
	/* Device attributes. */
	VHCA_CMD_QUERY_DEVICE = 0x0002,
	/* Port attributes, P_Key table and GID 0. */
	VHCA_CMD_QUERY_PORT = 0x0003,
	/* One set of counters of a port. */
	VHCA_CMD_QUERY_COUNTERS = 0x0004,
	/*
	 * Set or clear one entry of a RoCE port's GID table (WF-10): the driver
	 * mirrors ib_core's table (`add_gid`/`del_gid`), and a RoCE QP's or AH's
	 * `sgid_index` names the source address of its frames. NOT_SUPPORTED on an
	 * InfiniBand port.
	 */
	VHCA_CMD_SET_GID = 0x0005,
	/*
	 * Hand one subnet-management MAD for the port to the device's SMA (AD-09,
	 * AD-12; issue 26), as mlx4/mlx5 `process_mad` hand them to firmware
	 * (MAD_IFC): a SubnGet/SubnSet/SubnTrapRepress (class 0x01 LID-routed or
	 * 0x81 directed route) that ib_core's SMI takes locally
	 * (`handle_outgoing_dr_smp`). Output: the SMA's response, if it made one
	 * (ABI 3.5).
	 */
	VHCA_CMD_MAD_IFC = 0x0006,
	/*
	 * Set and clear the port's host-settable PortInfo:CapabilityMask bits
	 * (`VHCA_PORT_CAP_HOST_SETTABLE`) in the device's SMA, as mlx4's SET_PORT
	 * does from `modify_port`: the driver passes ib_core's set/clr_port_cap_mask
	 * (IsSM while an SM holds issm, IsCM from ib_cm). A change sends trap 144 to
	 * the SM (AD-09; ABI 3.6). BAD_PARAM for another bit or one both set and
	 * cleared (nothing changes); NOT_SUPPORTED on a port with no SMA (RoCE).
	 * Output: the CapabilityMask now.
	 */
	VHCA_CMD_SET_PORT_CAPS = 0x0007,
	/*
	 * Set the node's NodeDescription in the device's SMA, as mlx4's SET_NODE
	 * does from `modify_device` (sysfs `node_desc`, rdma-ndd): what
	 * SubnGet(NodeDescription) answers from then on; a change sends trap 144
	 * with NodeDescriptionChange (AD-09; ABI 3.6). BAD_PARAM for a length past
	 * 64, a NUL within it or a byte after it that is not NUL; NOT_SUPPORTED on a
	 * port with no SMA. A device reset brings back the device's own description
	 * and capability bits.
	 */
	VHCA_CMD_SET_NODE_DESC = 0x0008,
	/* Allocate a protection domain (MP-01). */
	VHCA_CMD_ALLOC_PD = 0x0010,
	/* Deallocate a PD; BUSY while an MR, QP or SRQ uses it. */
	VHCA_CMD_DEALLOC_PD = 0x0011,
	/* Create a completion event queue. */
	VHCA_CMD_CREATE_EQ = 0x0020,
	/* Destroy an EQ; BUSY while a CQ uses it. */
	VHCA_CMD_DESTROY_EQ = 0x0021,
	/* Create a CQ (CQ-01). */
	VHCA_CMD_CREATE_CQ = 0x0028,
	/* Destroy a CQ; BUSY while a QP uses it. */
	VHCA_CMD_DESTROY_CQ = 0x0029,
	/*
	 * Move a CQ to a new ring of another size (CQ-04), keeping the CQEs not yet
	 * consumed (RESIZE_PROTOCOL).
	 */
	VHCA_CMD_RESIZE_CQ = 0x002A,
	/* Create an SRQ (SR-01). */
	VHCA_CMD_CREATE_SRQ = 0x0030,
	/* Set and arm the SRQ limit. */
	VHCA_CMD_MODIFY_SRQ = 0x0031,
	/* SRQ attributes. */
	VHCA_CMD_QUERY_SRQ = 0x0032,
	/* Destroy an SRQ; BUSY while a QP uses it. */
	VHCA_CMD_DESTROY_SRQ = 0x0033,
	/*
	 * Move an SRQ to a new ring of another size (`ibv_modify_srq` with
	 * IBV_SRQ_MAX_WR), keeping the WQEs posted (RESIZE_PROTOCOL).
	 */
	VHCA_CMD_RESIZE_SRQ = 0x0034,
	/* Create a QP, in Reset (QS-09). */
	VHCA_CMD_CREATE_QP = 0x0040,
	/* Modify a QP (QS-01, QS-02). */
	VHCA_CMD_MODIFY_QP = 0x0041,
	/* QP attributes. */
	VHCA_CMD_QUERY_QP = 0x0042,
	/* Destroy a QP. */
	VHCA_CMD_DESTROY_QP = 0x0043,
	/* Register a memory region (MP-02, MP-03). */
	VHCA_CMD_REG_MR = 0x0050,
	/* Reregister a memory region; the keys stay the same. */
	VHCA_CMD_REREG_MR = 0x0051,
	/*
	 * Deregister a memory region; BUSY while a memory window is bound to it.
	 */
	VHCA_CMD_DEREG_MR = 0x0052,
	/*
	 * Install translations of an ODP MR (`struct vhca_map_odp_in`) and restart
	 * the work waiting on them (issue 29). BAD_PARAM for a key that is not an
	 * ODP MR, a range outside it, a va not 4 KiB aligned or a bad page list;
	 * NOT_SUPPORTED when ODP is off.
	 */
	VHCA_CMD_MAP_ODP = 0x0053,
	/*
	 * Remove translations of an ODP MR (`struct vhca_unmap_odp_in`): when the
	 * command completes no device access uses them any more. BAD_PARAM as
	 * MAP_ODP.
	 */
	VHCA_CMD_UNMAP_ODP = 0x0054,
	/*
	 * The guest could not fault in these pages of an ODP MR (`struct
	 * vhca_odp_fault_fail_in`): work waiting on them fails (requester: error
	 * completion and the QP to Error; responder: NAK remote access error on the
	 * retry). BAD_PARAM as MAP_ODP.
	 */
	VHCA_CMD_ODP_FAULT_FAIL = 0x0055,
	/* Allocate a memory window (MP-06, MP-07), unbound. */
	VHCA_CMD_ALLOC_MW = 0x0058,
	/* Deallocate a memory window (bound or not). */
	VHCA_CMD_DEALLOC_MW = 0x0059,
	/*
	 * Attach a UD QP to a multicast group (AD-08): from then on the group's
	 * packets (DestQP 0xFFFFFF, GRH with the MGID) reach it. Attaching twice is
	 * no error. BAD_PARAM for a QP that is not UD, a GID that is not multicast,
	 * a LID outside 0xC000..=0xFFFE on InfiniBand or another LID than the
	 * group's; NO_RESOURCES past QUERY_DEVICE's max_mcast_grp,
	 * max_mcast_qp_attach or max_total_mcast_qp_attach. Destroying a QP detaches
	 * it.
	 */
	VHCA_CMD_ATTACH_MCAST = 0x0070,
	/*
	 * Detach a QP from a multicast group (AD-08); BAD_PARAM when it was not
	 * attached.
	 */
	VHCA_CMD_DETACH_MCAST = 0x0071,
	/* Open an XRC domain (SR-02). */
	VHCA_CMD_ALLOC_XRCD = 0x0012,
	/* Close an XRC domain; BUSY while an XRC SRQ or XRC TGT QP is in it. */
	VHCA_CMD_DEALLOC_XRCD = 0x0013,
	/*
	 * Allocate a Reliable Datagram domain (AD-11); NO_RESOURCES past the
	 * device's bound.
	 */
	VHCA_CMD_ALLOC_RDD = 0x0014,
	/* Deallocate an RD domain; BUSY while an EE context or RD QP is in it. */
	VHCA_CMD_DEALLOC_RDD = 0x0015,
	/* Create an EE context in an RD domain (AD-11), in Reset. */
	VHCA_CMD_CREATE_EEC = 0x0080,
	/*
	 * Modify an EE context: Reset->Init (P_Key index), Init->RTR (path, MTU,
	 * remote EECN, receive PSN, RNR timer), RTR->RTS (send PSN, timeout, retry
	 * counts), RTS->RTS, any->Reset, any->Error.
	 */
	VHCA_CMD_MODIFY_EEC = 0x0081,
	/* EE context attributes and RD domain. */
	VHCA_CMD_QUERY_EEC = 0x0082,
	/* Destroy an EE context; the messages it carries fail. */
	VHCA_CMD_DESTROY_EEC = 0x0083,
};

/* Page-list (`struct vhca_pbl`) constants. */
/*
 * `levels`: `addr` is the first of `npages` physically contiguous pages
 * (kernel rings from dma_alloc_coherent).
 */
#define VHCA_PBL_CONTIGUOUS     0U
/*
 * `levels`: `addr` is a physically contiguous array of `npages` u64 page
 * addresses, 8-byte aligned. Best kept within one 4 KiB page (512 pages);
 * larger lists should use TWO_LEVEL, which needs no large contiguous
 * allocation in the guest.
 */
#define VHCA_PBL_ONE_LEVEL      1U
/*
 * `levels`: `addr` is a physically contiguous array of ceil(npages / 512) u64
 * addresses of 4 KiB-aligned tables, each of 512 page addresses (the last one
 * partly used): one 4 KiB directory covers 262144 pages, as pvrdma's page
 * directory.
 */
#define VHCA_PBL_TWO_LEVEL      2U
/* Bytes per second-level table, whatever the data page size. */
#define VHCA_PBL_TABLE_SIZE     4096U
/* Page addresses per second-level table. */
#define VHCA_PBL_TABLE_ENTRIES  512U
/*
 * Most pages in one list: 1 GiB of 4 KiB pages; bounds what one command makes
 * the device read and keep.
 */
#define VHCA_PBL_MAX_PAGES      (1U << 18)
/* Smallest data page: 4 KiB (the engine's MIN_PAGE_SIZE). */
#define VHCA_PBL_MIN_PAGE_SHIFT 12U
/* Largest data page: 1 GiB (the engine's MAX_PAGE_SIZE). */
#define VHCA_PBL_MAX_PAGE_SHIFT 30U

/*
 * A page list: where a ring or an MR lives in guest-physical memory, page by
 * page (user buffers are not physically contiguous; ARCHITECTURE.md §4).
 * Data pages are 2^page_shift bytes and aligned to that. A ring starts at the
 * first byte of its first page, and its entries never straddle a page
 * (strides are at most 4 KiB).
 */
struct vhca_pbl {
	/* Guest-physical address: the first page, or the list (`levels`). */
	__u64 addr;
	/* Data pages. */
	__u32 npages;
	/* log2 of the data page size (VHCA_PBL_MIN_PAGE_SHIFT..=MAX). */
	__u8 page_shift;
	/* `VHCA_PBL_CONTIGUOUS`, `ONE_LEVEL` or `TWO_LEVEL`. */
	__u8 levels;
	/* Zero. */
	__u16 rsvd;
};
_Static_assert(sizeof(struct vhca_pbl) == 16, "vhca_pbl: size");
_Static_assert(offsetof(struct vhca_pbl, addr) == 0, "vhca_pbl.addr");
_Static_assert(offsetof(struct vhca_pbl, npages) == 8, "vhca_pbl.npages");
_Static_assert(offsetof(struct vhca_pbl, page_shift) == 12, "vhca_pbl.page_shift");
_Static_assert(offsetof(struct vhca_pbl, levels) == 13, "vhca_pbl.levels");
_Static_assert(offsetof(struct vhca_pbl, rsvd) == 14, "vhca_pbl.rsvd");

/*
 * Address vector (IBA 10.2.1, AD-02; `struct ibv_ah_attr`): a connected QP's
 * path (MODIFY_QP) or a UD destination (send WQE).
 */
struct vhca_av {
	/* Destination GID, network order, if `is_global`. */
	__u8 dgid[16];
	/* GRH flow label (20 bits), if `is_global`. */
	__u32 flow_label;
	/* Destination LID. */
	__u16 dlid;
	/* Service level. */
	__u8 sl;
	/* Low bits added to the port's LID to make the SLID (LMC, AD-01). */
	__u8 src_path_bits;
	/* `enum ibv_rate`; 0 = port rate. */
	__u8 static_rate;
	/* 1: send a GRH with the fields below. */
	__u8 is_global;
	/* GID table index of the SGID. */
	__u8 sgid_index;
	/* GRH hop limit. */
	__u8 hop_limit;
	/* GRH traffic class. */
	__u8 traffic_class;
	/* Port (1); 0 means the QP's port. */
	__u8 port_num;
	/*
	 * Zero, but in the UD segment of a GSI (QP1) send WQE: the index of the port
	 * P_Key table entry the send carries (`ib_ud_wr.pkey_index`, the partition
	 * the GSI answers in; AD-05, PV-03); past the table, the WQE completes with
	 * VHCA_WC_LOC_QP_OP_ERR. Ignored elsewhere.
	 */
	__u16 pkey_index;
	/*
	 * RoCE port: the destination MAC (the next hop for `dgid`, which the driver
	 * resolves, as ib_core's `ah_attr.roce.dmac`); zero on an InfiniBand port
	 * (A17.4.5).
	 */
	__u8 dmac[6];
	/* Zero. */
	__u8 rsvd2[2];
};
_Static_assert(sizeof(struct vhca_av) == 40, "vhca_av: size");
_Static_assert(offsetof(struct vhca_av, dgid) == 0, "vhca_av.dgid");
_Static_assert(offsetof(struct vhca_av, flow_label) == 16, "vhca_av.flow_label");
_Static_assert(offsetof(struct vhca_av, dlid) == 20, "vhca_av.dlid");
_Static_assert(offsetof(struct vhca_av, sl) == 22, "vhca_av.sl");
_Static_assert(offsetof(struct vhca_av, src_path_bits) == 23, "vhca_av.src_path_bits");
_Static_assert(offsetof(struct vhca_av, static_rate) == 24, "vhca_av.static_rate");
_Static_assert(offsetof(struct vhca_av, is_global) == 25, "vhca_av.is_global");
_Static_assert(offsetof(struct vhca_av, sgid_index) == 26, "vhca_av.sgid_index");
_Static_assert(offsetof(struct vhca_av, hop_limit) == 27, "vhca_av.hop_limit");
_Static_assert(offsetof(struct vhca_av, traffic_class) == 28, "vhca_av.traffic_class");
_Static_assert(offsetof(struct vhca_av, port_num) == 29, "vhca_av.port_num");
_Static_assert(offsetof(struct vhca_av, pkey_index) == 30, "vhca_av.pkey_index");
_Static_assert(offsetof(struct vhca_av, dmac) == 32, "vhca_av.dmac");
_Static_assert(offsetof(struct vhca_av, rsvd2) == 38, "vhca_av.rsvd2");

/*
 * A QP's alternate path (AD-10; `ibv_qp_attr`'s `alt_ah_attr`,
 * `alt_pkey_index`, `alt_port_num`, `alt_timeout`), valid where the attribute
 * mask has `ALT_PATH`.
 */
struct vhca_alt_path {
	struct vhca_av ah_attr;
	__u16 pkey_index;
	/* Port (1). */
	__u8 port_num;
	/* Local ACK timeout on the alternate path (as `timeout`). */
	__u8 timeout;
	/* Zero. */
	__u32 rsvd;
};
_Static_assert(sizeof(struct vhca_alt_path) == 48, "vhca_alt_path: size");
_Static_assert(offsetof(struct vhca_alt_path, ah_attr) == 0, "vhca_alt_path.ah_attr");
_Static_assert(offsetof(struct vhca_alt_path, pkey_index) == 40, "vhca_alt_path.pkey_index");
_Static_assert(offsetof(struct vhca_alt_path, port_num) == 42, "vhca_alt_path.port_num");
_Static_assert(offsetof(struct vhca_alt_path, timeout) == 43, "vhca_alt_path.timeout");
_Static_assert(offsetof(struct vhca_alt_path, rsvd) == 44, "vhca_alt_path.rsvd");

/*
 * QP sizes (`struct ibv_qp_cap`): asked for at CREATE_QP, granted in its
 * output.
 */
struct vhca_qp_cap {
	__u32 max_send_wr;
	__u32 max_recv_wr;
	__u32 max_send_sge;
	__u32 max_recv_sge;
	__u32 max_inline_data;
};
_Static_assert(sizeof(struct vhca_qp_cap) == 20, "vhca_qp_cap: size");
_Static_assert(offsetof(struct vhca_qp_cap, max_send_wr) == 0, "vhca_qp_cap.max_send_wr");
_Static_assert(offsetof(struct vhca_qp_cap, max_recv_wr) == 4, "vhca_qp_cap.max_recv_wr");
_Static_assert(offsetof(struct vhca_qp_cap, max_send_sge) == 8, "vhca_qp_cap.max_send_sge");
_Static_assert(offsetof(struct vhca_qp_cap, max_recv_sge) == 12, "vhca_qp_cap.max_recv_sge");
_Static_assert(offsetof(struct vhca_qp_cap, max_inline_data) == 16, "vhca_qp_cap.max_inline_data");

/*
 * QP attributes (`struct ibv_qp_attr`), valid where the attribute mask says.
 */
struct vhca_qp_attr {
	/* `enum vhca_qp_state`. */
	__u8 qp_state;
	/* `enum vhca_qp_state`: the state the driver believes the QP is in. */
	__u8 cur_qp_state;
	/* `enum vhca_mtu`. */
	__u8 path_mtu;
	/*
	 * Path migration state (AD-10): `enum ibv_mig_state` (0 Migrated, 1 Rearm, 2
	 * Armed); the device arms a Rearm at once.
	 */
	__u8 path_mig_state;
	__u32 qkey;
	/* Expected PSN of the responder (24 bits). */
	__u32 rq_psn;
	/* Next PSN of the requester (24 bits). */
	__u32 sq_psn;
	__u32 dest_qp_num;
	/* `VHCA_ACCESS_*` remote rights of the QP. */
	__u32 qp_access_flags;
	__u16 pkey_index;
	__u8 port_num;
	__u8 en_sqd_async_notify;
	__u8 max_rd_atomic;
	__u8 max_dest_rd_atomic;
	__u8 min_rnr_timer;
	/* Local ACK timeout: 4.096 us * 2^timeout, 0 = infinite (RL-10). */
	__u8 timeout;
	/* Transport retries, 0..=7; 7 is seven (RL-10). */
	__u8 retry_cnt;
	/* RNR retries, 0..=7; 7 is infinite (RL-11). */
	__u8 rnr_retry;
	/* Query only: the SQ is draining (SQD). */
	__u8 sq_draining;
	__u8 rsvd;
	/* The path. */
	struct vhca_av ah_attr;
	/* Query only: the sizes granted. */
	struct vhca_qp_cap cap;
};
_Static_assert(sizeof(struct vhca_qp_attr) == 96, "vhca_qp_attr: size");
_Static_assert(offsetof(struct vhca_qp_attr, qp_state) == 0, "vhca_qp_attr.qp_state");
_Static_assert(offsetof(struct vhca_qp_attr, cur_qp_state) == 1, "vhca_qp_attr.cur_qp_state");
_Static_assert(offsetof(struct vhca_qp_attr, path_mtu) == 2, "vhca_qp_attr.path_mtu");
_Static_assert(offsetof(struct vhca_qp_attr, path_mig_state) == 3, "vhca_qp_attr.path_mig_state");
_Static_assert(offsetof(struct vhca_qp_attr, qkey) == 4, "vhca_qp_attr.qkey");
_Static_assert(offsetof(struct vhca_qp_attr, rq_psn) == 8, "vhca_qp_attr.rq_psn");
_Static_assert(offsetof(struct vhca_qp_attr, sq_psn) == 12, "vhca_qp_attr.sq_psn");
_Static_assert(offsetof(struct vhca_qp_attr, dest_qp_num) == 16, "vhca_qp_attr.dest_qp_num");
_Static_assert(offsetof(struct vhca_qp_attr, qp_access_flags) == 20, "vhca_qp_attr.qp_access_flags");
_Static_assert(offsetof(struct vhca_qp_attr, pkey_index) == 24, "vhca_qp_attr.pkey_index");
_Static_assert(offsetof(struct vhca_qp_attr, port_num) == 26, "vhca_qp_attr.port_num");
_Static_assert(offsetof(struct vhca_qp_attr, en_sqd_async_notify) == 27, "vhca_qp_attr.en_sqd_async_notify");
_Static_assert(offsetof(struct vhca_qp_attr, max_rd_atomic) == 28, "vhca_qp_attr.max_rd_atomic");
_Static_assert(offsetof(struct vhca_qp_attr, max_dest_rd_atomic) == 29, "vhca_qp_attr.max_dest_rd_atomic");
_Static_assert(offsetof(struct vhca_qp_attr, min_rnr_timer) == 30, "vhca_qp_attr.min_rnr_timer");
_Static_assert(offsetof(struct vhca_qp_attr, timeout) == 31, "vhca_qp_attr.timeout");
_Static_assert(offsetof(struct vhca_qp_attr, retry_cnt) == 32, "vhca_qp_attr.retry_cnt");
_Static_assert(offsetof(struct vhca_qp_attr, rnr_retry) == 33, "vhca_qp_attr.rnr_retry");
_Static_assert(offsetof(struct vhca_qp_attr, sq_draining) == 34, "vhca_qp_attr.sq_draining");
_Static_assert(offsetof(struct vhca_qp_attr, rsvd) == 35, "vhca_qp_attr.rsvd");
_Static_assert(offsetof(struct vhca_qp_attr, ah_attr) == 36, "vhca_qp_attr.ah_attr");
_Static_assert(offsetof(struct vhca_qp_attr, cap) == 76, "vhca_qp_attr.cap");

/* REG_MR `flags`. */
/*
 * An identity MR over all guest memory for kernel verbs (get_dma_mr): iova 0,
 * length 2^64 - 1 (`u64::MAX`), `pbl` ignored; the device builds the
 * translation from its guest memory map.
 */
#define VHCA_REG_MR_F_DMA  (1U << 0)
/*
 * A fast-registration MR (MP-08; the kernel's ib_alloc_mr with
 * IB_MR_TYPE_MEM_REG): `pbl.npages` is the most pages it will map
 * (1..=QUERY_DEVICE's max_fast_reg_pages); `access`, `iova`, `length` and the
 * rest of `pbl` are zero. It is free (every access through its key fails)
 * until a REG_MR WQE registers it; LOCAL_INV and SEND_WITH_INV make it free
 * again. DEREG_MR takes any key byte of its index.
 */
#define VHCA_REG_MR_F_FAST (1U << 1)
/*
 * An on-demand paging MR (issue 29): `pbl` is all zero and every 4 KiB page
 * starts not present; MAP_ODP installs pages, UNMAP_ODP removes them, and an
 * access to a missing page raises a PAGE_FAULT EQE (`struct
 * vhca_eqe_page_fault`). With iova 0 and length 2^64 - 1 (`u64::MAX`) it is
 * an implicit MR over the whole address space. BAD_PARAM together with FAST
 * or DMA; NOT_SUPPORTED when the device has ODP off (QUERY_DEVICE's odp_caps
 * 0).
 */
#define VHCA_REG_MR_F_ODP  (1U << 2)
/*
 * An MR over device memory (issue 29 item 2; `ibv_reg_dm_mr`): `[iova, iova +
 * length)` is the `length` bytes of device memory from byte `pbl.addr` (the
 * DM byte offset, not a page list: BAR4 offset `VHCA_DM_OFFSET + pbl.addr`);
 * the rest of `pbl` is zero. Linear: byte `va` is DM byte `pbl.addr + (va -
 * iova)`. Verbs register it zero-based (IBV_ACCESS_ZERO_BASED: iova 0).
 * BAD_PARAM unless `[pbl.addr, pbl.addr + length)` lies inside the
 * CAP_DM_SIZE bytes (so with CAP_DM_SIZE 0, always). Not with DMA or FAST.
 */
#define VHCA_REG_MR_F_DM   (1U << 3)

/* On-demand paging (issue 29). */
/* log2 of the page size of every ODP translation (4 KiB). */
#define VHCA_ODP_PAGE_SHIFT    12U
/* Most pages one MAP_ODP installs. */
#define VHCA_ODP_MAX_MAP_PAGES 512U

/* REREG_MR `change` bits (`enum ibv_rereg_mr_flags`). */
#define VHCA_REREG_CHANGE_TRANSLATION (1U << 0)
#define VHCA_REREG_CHANGE_PD          (1U << 1)
#define VHCA_REREG_CHANGE_ACCESS      (1U << 2)

/* Memory window types (`enum ibv_mw_type`). */
enum vhca_mw_type {
	/* Bound to a PD, bound and unbound by BIND_MW only (MP-06). */
	VHCA_MW_TYPE1 = 1,
	/*
	 * Type 2B: bound to a QP, invalidated by LOCAL_INV or SEND_WITH_INV (MP-07).
	 */
	VHCA_MW_TYPE2 = 2,
	/*
	 * Type 2A: bound to a QP alone, invalidated by LOCAL_INV or SEND_WITH_INV;
	 * the QP cannot be destroyed while it is bound (MP-07).
	 */
	VHCA_MW_TYPE2_A = 3,
};

/*
 * GID types of a RoCE port's table (`enum ib_gid_type`); the device speaks
 * RoCEv2 only (WF-10).
 */
enum vhca_gid_type {
	/* RoCEv2: IPv4-mapped or IPv6 GID, UDP/IP encapsulation (A17). */
	VHCA_GID_TYPE_ROCE_V2 = 2,
};

/* MAD_IFC output flags (`MadIfcOut::flags`). */
/*
 * `MadIfcOut::mad` holds a response to send back (ib_core's
 * IB_MAD_RESULT_REPLY).
 */
#define VHCA_MAD_IFC_F_REPLY    (1 << 0)
/*
 * The device took the MAD and made no response (a Set it applied silently, a
 * TrapRepress, or one dropped by M_Key, IBA 14.2.4.2:
 * IB_MAD_RESULT_CONSUMED).
 */
#define VHCA_MAD_IFC_F_CONSUMED (1 << 1)

/*
 * PortInfo:CapabilityMask bits SET_PORT_CAPS takes (IBA 14.2.5.6; the
 * kernel's `IB_PORT_*` capability bits have the same values): the agents the
 * host runs, not what the port's hardware does.
 */
/* IsSM: an SM runs on the port (ib_umad while `issm` is held open). */
#define VHCA_PORT_CAP_IS_SM           (1U << 1)
/* IsSMdisabled: an SM is present but disabled. */
#define VHCA_PORT_CAP_IS_SM_DISABLED  (1U << 10)
/* IsCommunicationManagementSupported (ib_cm). */
#define VHCA_PORT_CAP_IS_CM           (1U << 16)
/* IsSNMPTunnelingSupported. */
#define VHCA_PORT_CAP_IS_SNMP_TUNNEL  (1U << 17)
/* IsDeviceManagementSupported. */
#define VHCA_PORT_CAP_IS_DEVICE_MGMT  (1U << 19)
/* IsVendorClassSupported. */
#define VHCA_PORT_CAP_IS_VENDOR_CLASS (1U << 20)
/* IsBootManagementSupported. */
#define VHCA_PORT_CAP_IS_BOOT_MGMT    (1U << 23)
/* Every bit above: what SET_PORT_CAPS may set or clear. */
#define VHCA_PORT_CAP_HOST_SETTABLE   0x9b0402U

/* DeviceAttr `odp_caps`, general byte (`enum ibv_odp_general_caps`). */
/* ODP MRs (REG_MR with `VHCA_REG_MR_F_ODP`). */
#define VHCA_ODP_CAP_SUPPORT   (1U << 0)
/* Implicit ODP MRs (iova 0, length 2^64 - 1). */
#define VHCA_ODP_CAP_IMPLICIT  (1U << 1)
/* Where the RC transport's byte starts. */
#define VHCA_ODP_CAP_RC_SHIFT  8U
/* Where the UD transport's byte starts. */
#define VHCA_ODP_CAP_UD_SHIFT  16U
/* Where the XRC transport's byte starts. */
#define VHCA_ODP_CAP_XRC_SHIFT 24U

/*
 * DeviceAttr `odp_caps`, one transport's byte (`enum
 * ibv_odp_transport_cap_bits`).
 */
#define VHCA_ODP_TRANSPORT_SEND     (1U << 0)
#define VHCA_ODP_TRANSPORT_RECV     (1U << 1)
#define VHCA_ODP_TRANSPORT_WRITE    (1U << 2)
#define VHCA_ODP_TRANSPORT_READ     (1U << 3)
#define VHCA_ODP_TRANSPORT_ATOMIC   (1U << 4)
#define VHCA_ODP_TRANSPORT_SRQ_RECV (1U << 5)

/*
 * EE context attributes (AD-11; IBA 11.2.x Modify EEC). A MODIFY_EEC to
 * `state` reads the fields of that transition: Reset->Init `pkey_index`;
 * Init->RTR `av`, `path_mtu`, `remote_eecn`, `rq_psn`, `min_rnr_timer`;
 * RTR->RTS `sq_psn`, `timeout`, `retry_cnt`, `rnr_retry`. QUERY_EEC returns
 * all, with the current send and expected PSNs.
 */
struct vhca_eec_attr {
	/* `enum vhca_qp_state` (no SQD or SQE). */
	__u8 state;
	/* `enum vhca_mtu`. */
	__u8 path_mtu;
	/* RNR NAK timer code (5 bits). */
	__u8 min_rnr_timer;
	/* Local ACK timeout exponent: 4.096 us * 2^timeout; 0 = none. */
	__u8 timeout;
	/* 0..=7. */
	__u8 retry_cnt;
	/* 0..=7; 7 = infinite. */
	__u8 rnr_retry;
	__u16 pkey_index;
	/* The peer's EE context (24 bits, nonzero). */
	__u32 remote_eecn;
	/* Expected PSN (24 bits). */
	__u32 rq_psn;
	/* Send PSN (24 bits). */
	__u32 sq_psn;
	/* Zero. */
	__u32 rsvd;
	/* The path to the peer. */
	struct vhca_av av;
};
_Static_assert(sizeof(struct vhca_eec_attr) == 64, "vhca_eec_attr: size");
_Static_assert(offsetof(struct vhca_eec_attr, state) == 0, "vhca_eec_attr.state");
_Static_assert(offsetof(struct vhca_eec_attr, path_mtu) == 1, "vhca_eec_attr.path_mtu");
_Static_assert(offsetof(struct vhca_eec_attr, min_rnr_timer) == 2, "vhca_eec_attr.min_rnr_timer");
_Static_assert(offsetof(struct vhca_eec_attr, timeout) == 3, "vhca_eec_attr.timeout");
_Static_assert(offsetof(struct vhca_eec_attr, retry_cnt) == 4, "vhca_eec_attr.retry_cnt");
_Static_assert(offsetof(struct vhca_eec_attr, rnr_retry) == 5, "vhca_eec_attr.rnr_retry");
_Static_assert(offsetof(struct vhca_eec_attr, pkey_index) == 6, "vhca_eec_attr.pkey_index");
_Static_assert(offsetof(struct vhca_eec_attr, remote_eecn) == 8, "vhca_eec_attr.remote_eecn");
_Static_assert(offsetof(struct vhca_eec_attr, rq_psn) == 12, "vhca_eec_attr.rq_psn");
_Static_assert(offsetof(struct vhca_eec_attr, sq_psn) == 16, "vhca_eec_attr.sq_psn");
_Static_assert(offsetof(struct vhca_eec_attr, rsvd) == 20, "vhca_eec_attr.rsvd");
_Static_assert(offsetof(struct vhca_eec_attr, av) == 24, "vhca_eec_attr.av");

/*
 * QUERY_DEVICE output (`struct ibv_device_attr`, with what the driver needs).
 */
struct vhca_device_attr {
	__u64 fw_ver;
	__u64 node_guid;
	__u64 sys_image_guid;
	__u64 max_mr_size;
	/* Supported MR page sizes, one bit per power of two. */
	__u64 page_size_cap;
	__u32 vendor_id;
	__u32 vendor_part_id;
	__u32 hw_ver;
	/* `VHCA_DEV_CAP_*`. */
	__u32 cap_flags;
	__u32 max_qp;
	__u32 max_qp_wr;
	__u32 max_sge;
	__u32 max_cq;
	__u32 max_cqe;
	__u32 max_mr;
	__u32 max_pd;
	__u32 max_srq;
	__u32 max_srq_wr;
	__u32 max_srq_sge;
	__u32 max_eq;
	__u32 max_eqe;
	__u32 max_inline_data;
	__u32 max_qp_rd_atom;
	__u32 max_qp_init_rd_atom;
	__u32 max_res_rd_atom;
	/* Largest message: 2^31 (C9-10, OP-09). */
	__u32 max_msg_sz;
	__u32 num_uars;
	__u16 msix_vectors;
	__u16 max_pkeys;
	__u8 local_ca_ack_delay;
	__u8 phys_port_cnt;
	/* `enum vhca_atomic_cap`. */
	__u8 atomic_cap;
	__u8 rsvd;
	/*
	 * Most pages of a fast-registration MR (MP-08; ABI 2.1): the largest
	 * `npages` of REG_MR with `VHCA_REG_MR_F_FAST` and of a REG_MR WQE.
	 */
	__u32 max_fast_reg_pages;
	/*
	 * On-demand paging (issue 29; ABI 3.7): `VHCA_ODP_CAP_*`, bits 0..7 general,
	 * then one byte of `VHCA_ODP_TRANSPORT_*` for RC (bits 8..15), UD (16..23)
	 * and XRC (24..31), as `struct ibv_odp_caps`. 0: no ODP.
	 */
	__u32 odp_caps;
	/* Multicast groups the port's QPs may join (AD-08; ABI 3.1). */
	__u32 max_mcast_grp;
	/* QPs attached to one multicast group. */
	__u32 max_mcast_qp_attach;
	/* Multicast attachments over all groups. */
	__u32 max_total_mcast_qp_attach;
	__u32 rsvd3;
};
_Static_assert(sizeof(struct vhca_device_attr) == 160, "vhca_device_attr: size");
_Static_assert(offsetof(struct vhca_device_attr, fw_ver) == 0, "vhca_device_attr.fw_ver");
_Static_assert(offsetof(struct vhca_device_attr, node_guid) == 8, "vhca_device_attr.node_guid");
_Static_assert(offsetof(struct vhca_device_attr, sys_image_guid) == 16, "vhca_device_attr.sys_image_guid");
_Static_assert(offsetof(struct vhca_device_attr, max_mr_size) == 24, "vhca_device_attr.max_mr_size");
_Static_assert(offsetof(struct vhca_device_attr, page_size_cap) == 32, "vhca_device_attr.page_size_cap");
_Static_assert(offsetof(struct vhca_device_attr, vendor_id) == 40, "vhca_device_attr.vendor_id");
_Static_assert(offsetof(struct vhca_device_attr, vendor_part_id) == 44, "vhca_device_attr.vendor_part_id");
_Static_assert(offsetof(struct vhca_device_attr, hw_ver) == 48, "vhca_device_attr.hw_ver");
_Static_assert(offsetof(struct vhca_device_attr, cap_flags) == 52, "vhca_device_attr.cap_flags");
_Static_assert(offsetof(struct vhca_device_attr, max_qp) == 56, "vhca_device_attr.max_qp");
_Static_assert(offsetof(struct vhca_device_attr, max_qp_wr) == 60, "vhca_device_attr.max_qp_wr");
_Static_assert(offsetof(struct vhca_device_attr, max_sge) == 64, "vhca_device_attr.max_sge");
_Static_assert(offsetof(struct vhca_device_attr, max_cq) == 68, "vhca_device_attr.max_cq");
_Static_assert(offsetof(struct vhca_device_attr, max_cqe) == 72, "vhca_device_attr.max_cqe");
_Static_assert(offsetof(struct vhca_device_attr, max_mr) == 76, "vhca_device_attr.max_mr");
_Static_assert(offsetof(struct vhca_device_attr, max_pd) == 80, "vhca_device_attr.max_pd");
_Static_assert(offsetof(struct vhca_device_attr, max_srq) == 84, "vhca_device_attr.max_srq");
_Static_assert(offsetof(struct vhca_device_attr, max_srq_wr) == 88, "vhca_device_attr.max_srq_wr");
_Static_assert(offsetof(struct vhca_device_attr, max_srq_sge) == 92, "vhca_device_attr.max_srq_sge");
_Static_assert(offsetof(struct vhca_device_attr, max_eq) == 96, "vhca_device_attr.max_eq");
_Static_assert(offsetof(struct vhca_device_attr, max_eqe) == 100, "vhca_device_attr.max_eqe");
_Static_assert(offsetof(struct vhca_device_attr, max_inline_data) == 104, "vhca_device_attr.max_inline_data");
_Static_assert(offsetof(struct vhca_device_attr, max_qp_rd_atom) == 108, "vhca_device_attr.max_qp_rd_atom");
_Static_assert(offsetof(struct vhca_device_attr, max_qp_init_rd_atom) == 112, "vhca_device_attr.max_qp_init_rd_atom");
_Static_assert(offsetof(struct vhca_device_attr, max_res_rd_atom) == 116, "vhca_device_attr.max_res_rd_atom");
_Static_assert(offsetof(struct vhca_device_attr, max_msg_sz) == 120, "vhca_device_attr.max_msg_sz");
_Static_assert(offsetof(struct vhca_device_attr, num_uars) == 124, "vhca_device_attr.num_uars");
_Static_assert(offsetof(struct vhca_device_attr, msix_vectors) == 128, "vhca_device_attr.msix_vectors");
_Static_assert(offsetof(struct vhca_device_attr, max_pkeys) == 130, "vhca_device_attr.max_pkeys");
_Static_assert(offsetof(struct vhca_device_attr, local_ca_ack_delay) == 132, "vhca_device_attr.local_ca_ack_delay");
_Static_assert(offsetof(struct vhca_device_attr, phys_port_cnt) == 133, "vhca_device_attr.phys_port_cnt");
_Static_assert(offsetof(struct vhca_device_attr, atomic_cap) == 134, "vhca_device_attr.atomic_cap");
_Static_assert(offsetof(struct vhca_device_attr, rsvd) == 135, "vhca_device_attr.rsvd");
_Static_assert(offsetof(struct vhca_device_attr, max_fast_reg_pages) == 136, "vhca_device_attr.max_fast_reg_pages");
_Static_assert(offsetof(struct vhca_device_attr, odp_caps) == 140, "vhca_device_attr.odp_caps");
_Static_assert(offsetof(struct vhca_device_attr, max_mcast_grp) == 144, "vhca_device_attr.max_mcast_grp");
_Static_assert(offsetof(struct vhca_device_attr, max_mcast_qp_attach) == 148, "vhca_device_attr.max_mcast_qp_attach");
_Static_assert(offsetof(struct vhca_device_attr, max_total_mcast_qp_attach) == 152, "vhca_device_attr.max_total_mcast_qp_attach");
_Static_assert(offsetof(struct vhca_device_attr, rsvd3) == 156, "vhca_device_attr.rsvd3");

/* QUERY_PORT input. */
struct vhca_query_port_in {
	/* Port number (1). */
	__u8 port;
	__u8 rsvd[3];
};
_Static_assert(sizeof(struct vhca_query_port_in) == 4, "vhca_query_port_in: size");
_Static_assert(offsetof(struct vhca_query_port_in, port) == 0, "vhca_query_port_in.port");
_Static_assert(offsetof(struct vhca_query_port_in, rsvd) == 1, "vhca_query_port_in.rsvd");

/*
 * QUERY_PORT output (`struct ibv_port_attr` plus the tables the driver
 * serves: P_Key table, GID 0 = subnet prefix : port GUID, AD-01, AD-05).
 */
struct vhca_port_attr {
	__u64 port_guid;
	__u64 gid_prefix;
	/* GID 0, network order. */
	__u8 gid0[16];
	__u32 max_msg_sz;
	__u16 lid;
	__u16 sm_lid;
	/* Valid entries of `pkeys`. */
	__u16 pkey_tbl_len;
	__u16 gid_tbl_len;
	/* `enum vhca_port_state`. */
	__u8 state;
	/* IBA physical port state: 5 = LinkUp, 3 = Disabled. */
	__u8 phys_state;
	/* `enum vhca_mtu`. */
	__u8 max_mtu;
	/* `enum vhca_mtu`. */
	__u8 active_mtu;
	__u8 lmc;
	__u8 sm_sl;
	/* `IBV_LINK_LAYER_*`: 1 = InfiniBand, 2 = Ethernet (RoCEv2, WF-10). */
	__u8 link_layer;
	/* `IB_WIDTH_*`. */
	__u8 active_width;
	/* `IB_SPEED_*`. */
	__u8 active_speed;
	/*
	 * Data VLs (AD-06), as PortInfo:VLCap encodes them: 1 = VL0, 2 = VL0-1, 3 =
	 * VL0-3, 4 = VL0-7, 5 = VL0-14.
	 */
	__u8 max_vl_num;
	__u8 rsvd[2];
	/* P_Key table; index 0 is normally 0xFFFF (AD-05). */
	__u16 pkeys[64];
	/*
	 * Ethernet port: its MAC, which the driver matches to the guest's netdev
	 * (the NIC that shares the port); zero on InfiniBand.
	 */
	__u8 mac[6];
	__u8 rsvd2[2];
};
_Static_assert(sizeof(struct vhca_port_attr) == 192, "vhca_port_attr: size");
_Static_assert(offsetof(struct vhca_port_attr, port_guid) == 0, "vhca_port_attr.port_guid");
_Static_assert(offsetof(struct vhca_port_attr, gid_prefix) == 8, "vhca_port_attr.gid_prefix");
_Static_assert(offsetof(struct vhca_port_attr, gid0) == 16, "vhca_port_attr.gid0");
_Static_assert(offsetof(struct vhca_port_attr, max_msg_sz) == 32, "vhca_port_attr.max_msg_sz");
_Static_assert(offsetof(struct vhca_port_attr, lid) == 36, "vhca_port_attr.lid");
_Static_assert(offsetof(struct vhca_port_attr, sm_lid) == 38, "vhca_port_attr.sm_lid");
_Static_assert(offsetof(struct vhca_port_attr, pkey_tbl_len) == 40, "vhca_port_attr.pkey_tbl_len");
_Static_assert(offsetof(struct vhca_port_attr, gid_tbl_len) == 42, "vhca_port_attr.gid_tbl_len");
_Static_assert(offsetof(struct vhca_port_attr, state) == 44, "vhca_port_attr.state");
_Static_assert(offsetof(struct vhca_port_attr, phys_state) == 45, "vhca_port_attr.phys_state");
_Static_assert(offsetof(struct vhca_port_attr, max_mtu) == 46, "vhca_port_attr.max_mtu");
_Static_assert(offsetof(struct vhca_port_attr, active_mtu) == 47, "vhca_port_attr.active_mtu");
_Static_assert(offsetof(struct vhca_port_attr, lmc) == 48, "vhca_port_attr.lmc");
_Static_assert(offsetof(struct vhca_port_attr, sm_sl) == 49, "vhca_port_attr.sm_sl");
_Static_assert(offsetof(struct vhca_port_attr, link_layer) == 50, "vhca_port_attr.link_layer");
_Static_assert(offsetof(struct vhca_port_attr, active_width) == 51, "vhca_port_attr.active_width");
_Static_assert(offsetof(struct vhca_port_attr, active_speed) == 52, "vhca_port_attr.active_speed");
_Static_assert(offsetof(struct vhca_port_attr, max_vl_num) == 53, "vhca_port_attr.max_vl_num");
_Static_assert(offsetof(struct vhca_port_attr, rsvd) == 54, "vhca_port_attr.rsvd");
_Static_assert(offsetof(struct vhca_port_attr, pkeys) == 56, "vhca_port_attr.pkeys");
_Static_assert(offsetof(struct vhca_port_attr, mac) == 184, "vhca_port_attr.mac");
_Static_assert(offsetof(struct vhca_port_attr, rsvd2) == 190, "vhca_port_attr.rsvd2");

/* QUERY_COUNTERS input. */
struct vhca_query_counters_in {
	__u8 port;
	/* `enum vhca_counter_set`. */
	__u8 set;
	__u16 rsvd;
};
_Static_assert(sizeof(struct vhca_query_counters_in) == 4, "vhca_query_counters_in: size");
_Static_assert(offsetof(struct vhca_query_counters_in, port) == 0, "vhca_query_counters_in.port");
_Static_assert(offsetof(struct vhca_query_counters_in, set) == 1, "vhca_query_counters_in.set");
_Static_assert(offsetof(struct vhca_query_counters_in, rsvd) == 2, "vhca_query_counters_in.rsvd");

/*
 * QUERY_COUNTERS output (mailbox): `count` u64 counters, in the order of the
 * set's `VHCA_COUNTERS_*_NAMES`. A newer device may return more than the
 * driver has names for; the driver shows the ones it knows.
 */
struct vhca_query_counters_out {
	__u32 count;
	__u32 rsvd;
	__u64 values[511];
};
_Static_assert(sizeof(struct vhca_query_counters_out) == 4096, "vhca_query_counters_out: size");
_Static_assert(offsetof(struct vhca_query_counters_out, count) == 0, "vhca_query_counters_out.count");
_Static_assert(offsetof(struct vhca_query_counters_out, rsvd) == 4, "vhca_query_counters_out.rsvd");
_Static_assert(offsetof(struct vhca_query_counters_out, values) == 8, "vhca_query_counters_out.values");

/* SET_GID input. */
struct vhca_set_gid_in {
	/* Table index, below the port's `gid_tbl_len`. */
	__u16 index;
	/* Port (1). */
	__u8 port;
	/* 1: set the entry to `gid`; 0: clear it (`gid` and `gid_type` zero). */
	__u8 valid;
	/* `enum vhca_gid_type`. */
	__u8 gid_type;
	__u8 rsvd[3];
	/*
	 * The GID, network order: an IPv4-mapped (::ffff:a.b.c.d) or IPv6 address of
	 * the netdev paired with the port.
	 */
	__u8 gid[16];
};
_Static_assert(sizeof(struct vhca_set_gid_in) == 24, "vhca_set_gid_in: size");
_Static_assert(offsetof(struct vhca_set_gid_in, index) == 0, "vhca_set_gid_in.index");
_Static_assert(offsetof(struct vhca_set_gid_in, port) == 2, "vhca_set_gid_in.port");
_Static_assert(offsetof(struct vhca_set_gid_in, valid) == 3, "vhca_set_gid_in.valid");
_Static_assert(offsetof(struct vhca_set_gid_in, gid_type) == 4, "vhca_set_gid_in.gid_type");
_Static_assert(offsetof(struct vhca_set_gid_in, rsvd) == 5, "vhca_set_gid_in.rsvd");
_Static_assert(offsetof(struct vhca_set_gid_in, gid) == 8, "vhca_set_gid_in.gid");

/*
 * MAD_IFC input (issue 26, AD-09): one 256-byte MAD as ib_core gives it to
 * `process_mad`, with where it came from.
 */
struct vhca_mad_ifc_in {
	/* Port (1). */
	__u8 port;
	__u8 rsvd0;
	/*
	 * The requester's LID (the source of a LID-routed SMP; 0xFFFF, permissive,
	 * when the guest's own SMI hands it over).
	 */
	__u16 slid;
	__u8 rsvd1[12];
	/* The MAD, network order, as on the wire. */
	__u8 mad[256];
};
_Static_assert(sizeof(struct vhca_mad_ifc_in) == 272, "vhca_mad_ifc_in: size");
_Static_assert(offsetof(struct vhca_mad_ifc_in, port) == 0, "vhca_mad_ifc_in.port");
_Static_assert(offsetof(struct vhca_mad_ifc_in, rsvd0) == 1, "vhca_mad_ifc_in.rsvd0");
_Static_assert(offsetof(struct vhca_mad_ifc_in, slid) == 2, "vhca_mad_ifc_in.slid");
_Static_assert(offsetof(struct vhca_mad_ifc_in, rsvd1) == 4, "vhca_mad_ifc_in.rsvd1");
_Static_assert(offsetof(struct vhca_mad_ifc_in, mad) == 16, "vhca_mad_ifc_in.mad");

/* MAD_IFC output. */
struct vhca_mad_ifc_out {
	/*
	 * `VHCA_MAD_IFC_F_*`; 0: the device does not handle this MAD (not a
	 * subnet-management request), ib_core goes on as without it.
	 */
	__u8 flags;
	__u8 rsvd0[15];
	/* The response (valid with `VHCA_MAD_IFC_F_REPLY`). */
	__u8 mad[256];
};
_Static_assert(sizeof(struct vhca_mad_ifc_out) == 272, "vhca_mad_ifc_out: size");
_Static_assert(offsetof(struct vhca_mad_ifc_out, flags) == 0, "vhca_mad_ifc_out.flags");
_Static_assert(offsetof(struct vhca_mad_ifc_out, rsvd0) == 1, "vhca_mad_ifc_out.rsvd0");
_Static_assert(offsetof(struct vhca_mad_ifc_out, mad) == 16, "vhca_mad_ifc_out.mad");

/*
 * SET_PORT_CAPS input: `set` then `clear`, both within
 * `VHCA_PORT_CAP_HOST_SETTABLE` and disjoint (ib_core's `struct
 * ib_port_modify` set/clr_port_cap_mask).
 */
struct vhca_set_port_caps_in {
	/* Port (1). */
	__u8 port;
	__u8 rsvd0[3];
	/* `VHCA_PORT_CAP_*` bits to set. */
	__u32 set;
	/* `VHCA_PORT_CAP_*` bits to clear. */
	__u32 clear;
	__u32 rsvd1;
};
_Static_assert(sizeof(struct vhca_set_port_caps_in) == 16, "vhca_set_port_caps_in: size");
_Static_assert(offsetof(struct vhca_set_port_caps_in, port) == 0, "vhca_set_port_caps_in.port");
_Static_assert(offsetof(struct vhca_set_port_caps_in, rsvd0) == 1, "vhca_set_port_caps_in.rsvd0");
_Static_assert(offsetof(struct vhca_set_port_caps_in, set) == 4, "vhca_set_port_caps_in.set");
_Static_assert(offsetof(struct vhca_set_port_caps_in, clear) == 8, "vhca_set_port_caps_in.clear");
_Static_assert(offsetof(struct vhca_set_port_caps_in, rsvd1) == 12, "vhca_set_port_caps_in.rsvd1");

/* SET_PORT_CAPS output. */
struct vhca_set_port_caps_out {
	/*
	 * PortInfo:CapabilityMask after the command, every bit (the SMA's own too),
	 * as SubnGet(PortInfo) reports it.
	 */
	__u32 capability_mask;
	__u32 rsvd;
};
_Static_assert(sizeof(struct vhca_set_port_caps_out) == 8, "vhca_set_port_caps_out: size");
_Static_assert(offsetof(struct vhca_set_port_caps_out, capability_mask) == 0, "vhca_set_port_caps_out.capability_mask");
_Static_assert(offsetof(struct vhca_set_port_caps_out, rsvd) == 4, "vhca_set_port_caps_out.rsvd");

/*
 * SET_NODE_DESC input (mailbox): the description as ib_core's
 * `ib_device_modify` node_desc holds it, UTF-8 padded with NULs (IBA
 * 14.2.5.2; 64 bytes hold no NUL at all).
 */
struct vhca_set_node_desc_in {
	/*
	 * Bytes of the description, at most 64: none of them NUL, every byte of
	 * `desc` after them NUL.
	 */
	__u8 len;
	__u8 rsvd[7];
	__u8 desc[64];
};
_Static_assert(sizeof(struct vhca_set_node_desc_in) == 72, "vhca_set_node_desc_in: size");
_Static_assert(offsetof(struct vhca_set_node_desc_in, len) == 0, "vhca_set_node_desc_in.len");
_Static_assert(offsetof(struct vhca_set_node_desc_in, rsvd) == 1, "vhca_set_node_desc_in.rsvd");
_Static_assert(offsetof(struct vhca_set_node_desc_in, desc) == 8, "vhca_set_node_desc_in.desc");

/* ALLOC_PD output. */
struct vhca_alloc_pd_out {
	__u32 pdn;
};
_Static_assert(sizeof(struct vhca_alloc_pd_out) == 4, "vhca_alloc_pd_out: size");
_Static_assert(offsetof(struct vhca_alloc_pd_out, pdn) == 0, "vhca_alloc_pd_out.pdn");

/* DEALLOC_PD input. */
struct vhca_dealloc_pd_in {
	__u32 pdn;
};
_Static_assert(sizeof(struct vhca_dealloc_pd_in) == 4, "vhca_dealloc_pd_in: size");
_Static_assert(offsetof(struct vhca_dealloc_pd_in, pdn) == 0, "vhca_dealloc_pd_in.pdn");

/*
 * CREATE_EQ input. EQ rings are zeroed by the driver (owner convention).
 */
struct vhca_create_eq_in {
	/* The ring: 2^log2_entries EQEs of 16 bytes. */
	struct vhca_pbl ring;
	/* UAR page of the doorbell slot (`struct vhca_eq_doorbell`); 0. */
	__u32 uar;
	__u16 db_slot;
	/* MSI-X vector, VHCA_MSIX_VECTOR_FIRST_COMP..CAP_MSIX_VECTORS. */
	__u16 vector;
	__u8 log2_entries;
	__u8 rsvd[7];
};
_Static_assert(sizeof(struct vhca_create_eq_in) == 32, "vhca_create_eq_in: size");
_Static_assert(offsetof(struct vhca_create_eq_in, ring) == 0, "vhca_create_eq_in.ring");
_Static_assert(offsetof(struct vhca_create_eq_in, uar) == 16, "vhca_create_eq_in.uar");
_Static_assert(offsetof(struct vhca_create_eq_in, db_slot) == 20, "vhca_create_eq_in.db_slot");
_Static_assert(offsetof(struct vhca_create_eq_in, vector) == 22, "vhca_create_eq_in.vector");
_Static_assert(offsetof(struct vhca_create_eq_in, log2_entries) == 24, "vhca_create_eq_in.log2_entries");
_Static_assert(offsetof(struct vhca_create_eq_in, rsvd) == 25, "vhca_create_eq_in.rsvd");

/* CREATE_EQ output. */
struct vhca_create_eq_out {
	__u32 eqn;
};
_Static_assert(sizeof(struct vhca_create_eq_out) == 4, "vhca_create_eq_out: size");
_Static_assert(offsetof(struct vhca_create_eq_out, eqn) == 0, "vhca_create_eq_out.eqn");

/* DESTROY_EQ input. */
struct vhca_destroy_eq_in {
	__u32 eqn;
};
_Static_assert(sizeof(struct vhca_destroy_eq_in) == 4, "vhca_destroy_eq_in: size");
_Static_assert(offsetof(struct vhca_destroy_eq_in, eqn) == 0, "vhca_destroy_eq_in.eqn");

/*
 * CREATE_CQ input. CQ rings are zeroed by the driver (owner convention).
 */
struct vhca_create_cq_in {
	/* The ring: 2^log2_entries CQEs of 64 bytes. */
	struct vhca_pbl ring;
	/* EQ for completion events (0 = the async EQ, vector 0). */
	__u32 eqn;
	/* UAR page of the doorbell slot (`struct vhca_cq_doorbell`). */
	__u32 uar;
	__u16 db_slot;
	__u8 log2_entries;
	__u8 rsvd[5];
};
_Static_assert(sizeof(struct vhca_create_cq_in) == 32, "vhca_create_cq_in: size");
_Static_assert(offsetof(struct vhca_create_cq_in, ring) == 0, "vhca_create_cq_in.ring");
_Static_assert(offsetof(struct vhca_create_cq_in, eqn) == 16, "vhca_create_cq_in.eqn");
_Static_assert(offsetof(struct vhca_create_cq_in, uar) == 20, "vhca_create_cq_in.uar");
_Static_assert(offsetof(struct vhca_create_cq_in, db_slot) == 24, "vhca_create_cq_in.db_slot");
_Static_assert(offsetof(struct vhca_create_cq_in, log2_entries) == 26, "vhca_create_cq_in.log2_entries");
_Static_assert(offsetof(struct vhca_create_cq_in, rsvd) == 27, "vhca_create_cq_in.rsvd");

/* CREATE_CQ output. */
struct vhca_create_cq_out {
	__u32 cqn;
	/*
	 * Usable entries: the whole ring (the device reads the consumer index, so no
	 * slot is kept empty).
	 */
	__u32 entries;
};
_Static_assert(sizeof(struct vhca_create_cq_out) == 8, "vhca_create_cq_out: size");
_Static_assert(offsetof(struct vhca_create_cq_out, cqn) == 0, "vhca_create_cq_out.cqn");
_Static_assert(offsetof(struct vhca_create_cq_out, entries) == 4, "vhca_create_cq_out.entries");

/* DESTROY_CQ input. */
struct vhca_destroy_cq_in {
	__u32 cqn;
};
_Static_assert(sizeof(struct vhca_destroy_cq_in) == 4, "vhca_destroy_cq_in: size");
_Static_assert(offsetof(struct vhca_destroy_cq_in, cqn) == 0, "vhca_destroy_cq_in.cqn");

/*
 * RESIZE_CQ input: the CQ's new ring, which the device fills itself (no need
 * to zero it; RESIZE_PROTOCOL).
 */
struct vhca_resize_cq_in {
	__u32 cqn;
	/* The new ring: 2^log2_entries CQEs of 64 bytes. */
	__u8 log2_entries;
	__u8 rsvd[3];
	struct vhca_pbl ring;
};
_Static_assert(sizeof(struct vhca_resize_cq_in) == 24, "vhca_resize_cq_in: size");
_Static_assert(offsetof(struct vhca_resize_cq_in, cqn) == 0, "vhca_resize_cq_in.cqn");
_Static_assert(offsetof(struct vhca_resize_cq_in, log2_entries) == 4, "vhca_resize_cq_in.log2_entries");
_Static_assert(offsetof(struct vhca_resize_cq_in, rsvd) == 5, "vhca_resize_cq_in.rsvd");
_Static_assert(offsetof(struct vhca_resize_cq_in, ring) == 8, "vhca_resize_cq_in.ring");

/* RESIZE_CQ output. */
struct vhca_resize_cq_out {
	/* Usable entries of the new ring (the whole ring). */
	__u32 entries;
};
_Static_assert(sizeof(struct vhca_resize_cq_out) == 4, "vhca_resize_cq_out: size");
_Static_assert(offsetof(struct vhca_resize_cq_out, entries) == 0, "vhca_resize_cq_out.entries");

/* CREATE_SRQ input (mailbox). */
struct vhca_create_srq_in {
	__u32 pdn;
	__u32 max_wr;
	__u32 max_sge;
	/* Armed limit at creation (0 = not armed). */
	__u32 srq_limit;
	/* UAR page of the doorbell slot (`struct vhca_srq_doorbell`). */
	__u32 uar;
	__u16 db_slot;
	/* Ring entries: 2^log2_entries >= max_wr. */
	__u8 log2_entries;
	/* log2 of the receive WQE stride (VHCA_RQ_MIN_WQE_SHIFT..=MAX). */
	__u8 wqe_shift;
	/* The ring. */
	struct vhca_pbl ring;
	/* `enum vhca_srq_type`. */
	__u8 srq_type;
	__u8 rsvd[3];
	/* XRC SRQ: its XRC domain (SR-02); else zero. */
	__u32 xrcdn;
	/* XRC SRQ: the CQ its receives complete on; else zero. */
	__u32 cqn;
	__u32 rsvd2;
};
_Static_assert(sizeof(struct vhca_create_srq_in) == 56, "vhca_create_srq_in: size");
_Static_assert(offsetof(struct vhca_create_srq_in, pdn) == 0, "vhca_create_srq_in.pdn");
_Static_assert(offsetof(struct vhca_create_srq_in, max_wr) == 4, "vhca_create_srq_in.max_wr");
_Static_assert(offsetof(struct vhca_create_srq_in, max_sge) == 8, "vhca_create_srq_in.max_sge");
_Static_assert(offsetof(struct vhca_create_srq_in, srq_limit) == 12, "vhca_create_srq_in.srq_limit");
_Static_assert(offsetof(struct vhca_create_srq_in, uar) == 16, "vhca_create_srq_in.uar");
_Static_assert(offsetof(struct vhca_create_srq_in, db_slot) == 20, "vhca_create_srq_in.db_slot");
_Static_assert(offsetof(struct vhca_create_srq_in, log2_entries) == 22, "vhca_create_srq_in.log2_entries");
_Static_assert(offsetof(struct vhca_create_srq_in, wqe_shift) == 23, "vhca_create_srq_in.wqe_shift");
_Static_assert(offsetof(struct vhca_create_srq_in, ring) == 24, "vhca_create_srq_in.ring");
_Static_assert(offsetof(struct vhca_create_srq_in, srq_type) == 40, "vhca_create_srq_in.srq_type");
_Static_assert(offsetof(struct vhca_create_srq_in, rsvd) == 41, "vhca_create_srq_in.rsvd");
_Static_assert(offsetof(struct vhca_create_srq_in, xrcdn) == 44, "vhca_create_srq_in.xrcdn");
_Static_assert(offsetof(struct vhca_create_srq_in, cqn) == 48, "vhca_create_srq_in.cqn");
_Static_assert(offsetof(struct vhca_create_srq_in, rsvd2) == 52, "vhca_create_srq_in.rsvd2");

/* CREATE_SRQ output. */
struct vhca_create_srq_out {
	__u32 srqn;
	__u32 max_wr;
	__u32 max_sge;
};
_Static_assert(sizeof(struct vhca_create_srq_out) == 12, "vhca_create_srq_out: size");
_Static_assert(offsetof(struct vhca_create_srq_out, srqn) == 0, "vhca_create_srq_out.srqn");
_Static_assert(offsetof(struct vhca_create_srq_out, max_wr) == 4, "vhca_create_srq_out.max_wr");
_Static_assert(offsetof(struct vhca_create_srq_out, max_sge) == 8, "vhca_create_srq_out.max_sge");

/* MODIFY_SRQ input. */
struct vhca_modify_srq_in {
	__u32 srqn;
	/* `VHCA_SRQ_ATTR_*`. */
	__u32 attr_mask;
	__u32 max_wr;
	__u32 srq_limit;
};
_Static_assert(sizeof(struct vhca_modify_srq_in) == 16, "vhca_modify_srq_in: size");
_Static_assert(offsetof(struct vhca_modify_srq_in, srqn) == 0, "vhca_modify_srq_in.srqn");
_Static_assert(offsetof(struct vhca_modify_srq_in, attr_mask) == 4, "vhca_modify_srq_in.attr_mask");
_Static_assert(offsetof(struct vhca_modify_srq_in, max_wr) == 8, "vhca_modify_srq_in.max_wr");
_Static_assert(offsetof(struct vhca_modify_srq_in, srq_limit) == 12, "vhca_modify_srq_in.srq_limit");

/* QUERY_SRQ input. */
struct vhca_query_srq_in {
	__u32 srqn;
};
_Static_assert(sizeof(struct vhca_query_srq_in) == 4, "vhca_query_srq_in: size");
_Static_assert(offsetof(struct vhca_query_srq_in, srqn) == 0, "vhca_query_srq_in.srqn");

/* QUERY_SRQ output. */
struct vhca_query_srq_out {
	__u32 max_wr;
	__u32 max_sge;
	/* Armed limit, 0 if not armed. */
	__u32 srq_limit;
	/* WQEs posted and not yet consumed. */
	__u32 wqe_count;
};
_Static_assert(sizeof(struct vhca_query_srq_out) == 16, "vhca_query_srq_out: size");
_Static_assert(offsetof(struct vhca_query_srq_out, max_wr) == 0, "vhca_query_srq_out.max_wr");
_Static_assert(offsetof(struct vhca_query_srq_out, max_sge) == 4, "vhca_query_srq_out.max_sge");
_Static_assert(offsetof(struct vhca_query_srq_out, srq_limit) == 8, "vhca_query_srq_out.srq_limit");
_Static_assert(offsetof(struct vhca_query_srq_out, wqe_count) == 12, "vhca_query_srq_out.wqe_count");

/* DESTROY_SRQ input. */
struct vhca_destroy_srq_in {
	__u32 srqn;
};
_Static_assert(sizeof(struct vhca_destroy_srq_in) == 4, "vhca_destroy_srq_in: size");
_Static_assert(offsetof(struct vhca_destroy_srq_in, srqn) == 0, "vhca_destroy_srq_in.srqn");

/*
 * RESIZE_SRQ input: the SRQ's new ring, of the same WQE stride
 * (RESIZE_PROTOCOL).
 */
struct vhca_resize_srq_in {
	__u32 srqn;
	/* WQEs the SRQ must hold; 0 < max_wr <= 2^log2_entries. */
	__u32 max_wr;
	/* New ring entries: 2^log2_entries. */
	__u8 log2_entries;
	__u8 rsvd[7];
	/* The new ring. */
	struct vhca_pbl ring;
};
_Static_assert(sizeof(struct vhca_resize_srq_in) == 32, "vhca_resize_srq_in: size");
_Static_assert(offsetof(struct vhca_resize_srq_in, srqn) == 0, "vhca_resize_srq_in.srqn");
_Static_assert(offsetof(struct vhca_resize_srq_in, max_wr) == 4, "vhca_resize_srq_in.max_wr");
_Static_assert(offsetof(struct vhca_resize_srq_in, log2_entries) == 8, "vhca_resize_srq_in.log2_entries");
_Static_assert(offsetof(struct vhca_resize_srq_in, rsvd) == 9, "vhca_resize_srq_in.rsvd");
_Static_assert(offsetof(struct vhca_resize_srq_in, ring) == 16, "vhca_resize_srq_in.ring");

/* RESIZE_SRQ output. */
struct vhca_resize_srq_out {
	/* WQEs the SRQ holds now (the whole ring). */
	__u32 max_wr;
};
_Static_assert(sizeof(struct vhca_resize_srq_out) == 4, "vhca_resize_srq_out: size");
_Static_assert(offsetof(struct vhca_resize_srq_out, max_wr) == 0, "vhca_resize_srq_out.max_wr");

/* CREATE_QP input (mailbox). The QP starts in Reset. */
struct vhca_create_qp_in {
	/* `enum vhca_qp_type`. */
	__u8 qp_type;
	/* 1: every send WQE completes, signaled or not. */
	__u8 sq_sig_all;
	/* log2 of the send WQE stride (VHCA_SQ_MIN_WQE_SHIFT..=MAX). */
	__u8 sq_wqe_shift;
	/* log2 of the receive WQE stride (VHCA_RQ_MIN_WQE_SHIFT..=MAX). */
	__u8 rq_wqe_shift;
	/* SQ ring entries: 2^log2_sq_size >= cap.max_send_wr. */
	__u8 log2_sq_size;
	/* RQ ring entries: 2^log2_rq_size >= cap.max_recv_wr (0 with an SRQ). */
	__u8 log2_rq_size;
	__u8 port;
	__u8 rsvd0;
	__u32 pdn;
	__u32 send_cqn;
	__u32 recv_cqn;
	/* `VHCA_NONE` for none. */
	__u32 srqn;
	/* Sizes asked for. */
	struct vhca_qp_cap cap;
	/* UAR page of the doorbell slot (`struct vhca_qp_doorbell`). */
	__u32 uar;
	__u16 db_slot;
	__u8 rsvd1[2];
	/*
	 * XRC_TGT: its XRC domain (SR-02); RD: its RD domain (AD-11); else zero.
	 */
	__u32 xrcdn;
	/* SQ ring. */
	struct vhca_pbl sq;
	/* RQ ring (npages 0 with an SRQ). */
	struct vhca_pbl rq;
};
_Static_assert(sizeof(struct vhca_create_qp_in) == 88, "vhca_create_qp_in: size");
_Static_assert(offsetof(struct vhca_create_qp_in, qp_type) == 0, "vhca_create_qp_in.qp_type");
_Static_assert(offsetof(struct vhca_create_qp_in, sq_sig_all) == 1, "vhca_create_qp_in.sq_sig_all");
_Static_assert(offsetof(struct vhca_create_qp_in, sq_wqe_shift) == 2, "vhca_create_qp_in.sq_wqe_shift");
_Static_assert(offsetof(struct vhca_create_qp_in, rq_wqe_shift) == 3, "vhca_create_qp_in.rq_wqe_shift");
_Static_assert(offsetof(struct vhca_create_qp_in, log2_sq_size) == 4, "vhca_create_qp_in.log2_sq_size");
_Static_assert(offsetof(struct vhca_create_qp_in, log2_rq_size) == 5, "vhca_create_qp_in.log2_rq_size");
_Static_assert(offsetof(struct vhca_create_qp_in, port) == 6, "vhca_create_qp_in.port");
_Static_assert(offsetof(struct vhca_create_qp_in, rsvd0) == 7, "vhca_create_qp_in.rsvd0");
_Static_assert(offsetof(struct vhca_create_qp_in, pdn) == 8, "vhca_create_qp_in.pdn");
_Static_assert(offsetof(struct vhca_create_qp_in, send_cqn) == 12, "vhca_create_qp_in.send_cqn");
_Static_assert(offsetof(struct vhca_create_qp_in, recv_cqn) == 16, "vhca_create_qp_in.recv_cqn");
_Static_assert(offsetof(struct vhca_create_qp_in, srqn) == 20, "vhca_create_qp_in.srqn");
_Static_assert(offsetof(struct vhca_create_qp_in, cap) == 24, "vhca_create_qp_in.cap");
_Static_assert(offsetof(struct vhca_create_qp_in, uar) == 44, "vhca_create_qp_in.uar");
_Static_assert(offsetof(struct vhca_create_qp_in, db_slot) == 48, "vhca_create_qp_in.db_slot");
_Static_assert(offsetof(struct vhca_create_qp_in, rsvd1) == 50, "vhca_create_qp_in.rsvd1");
_Static_assert(offsetof(struct vhca_create_qp_in, xrcdn) == 52, "vhca_create_qp_in.xrcdn");
_Static_assert(offsetof(struct vhca_create_qp_in, sq) == 56, "vhca_create_qp_in.sq");
_Static_assert(offsetof(struct vhca_create_qp_in, rq) == 72, "vhca_create_qp_in.rq");

/* CREATE_QP output. */
struct vhca_create_qp_out {
	__u32 qpn;
	/* Sizes granted (at least those asked for). */
	struct vhca_qp_cap cap;
};
_Static_assert(sizeof(struct vhca_create_qp_out) == 24, "vhca_create_qp_out: size");
_Static_assert(offsetof(struct vhca_create_qp_out, qpn) == 0, "vhca_create_qp_out.qpn");
_Static_assert(offsetof(struct vhca_create_qp_out, cap) == 4, "vhca_create_qp_out.cap");

/*
 * MODIFY_QP input (mailbox). Only the attributes `attr_mask` names are read.
 * A transition to Reset also takes the producer indices now in the QP's
 * doorbell slot as the point from which WQEs are new, as CREATE_QP does: WQEs
 * posted and not yet fetched are dropped, and the driver's free-running
 * indices need not restart at zero.
 */
struct vhca_modify_qp_in {
	__u32 qpn;
	/* `VHCA_QP_ATTR_*` (`ibv_qp_attr_mask` bits). */
	__u32 attr_mask;
	struct vhca_qp_attr attr;
	/* With `VHCA_QP_ATTR_ALT_PATH` (AD-10). */
	struct vhca_alt_path alt;
};
_Static_assert(sizeof(struct vhca_modify_qp_in) == 152, "vhca_modify_qp_in: size");
_Static_assert(offsetof(struct vhca_modify_qp_in, qpn) == 0, "vhca_modify_qp_in.qpn");
_Static_assert(offsetof(struct vhca_modify_qp_in, attr_mask) == 4, "vhca_modify_qp_in.attr_mask");
_Static_assert(offsetof(struct vhca_modify_qp_in, attr) == 8, "vhca_modify_qp_in.attr");
_Static_assert(offsetof(struct vhca_modify_qp_in, alt) == 104, "vhca_modify_qp_in.alt");

/* QUERY_QP input. */
struct vhca_query_qp_in {
	__u32 qpn;
};
_Static_assert(sizeof(struct vhca_query_qp_in) == 4, "vhca_query_qp_in: size");
_Static_assert(offsetof(struct vhca_query_qp_in, qpn) == 0, "vhca_query_qp_in.qpn");

/*
 * QUERY_QP output (mailbox): every attribute, and the creation parameters.
 */
struct vhca_query_qp_out {
	struct vhca_qp_attr attr;
	/* `enum vhca_qp_type`. */
	__u8 qp_type;
	__u8 sq_sig_all;
	__u16 rsvd0;
	__u32 pdn;
	__u32 send_cqn;
	__u32 recv_cqn;
	__u32 srqn;
	__u32 rsvd1;
	/* The alternate path (AD-10); after a migration the former primary. */
	struct vhca_alt_path alt;
};
_Static_assert(sizeof(struct vhca_query_qp_out) == 168, "vhca_query_qp_out: size");
_Static_assert(offsetof(struct vhca_query_qp_out, attr) == 0, "vhca_query_qp_out.attr");
_Static_assert(offsetof(struct vhca_query_qp_out, qp_type) == 96, "vhca_query_qp_out.qp_type");
_Static_assert(offsetof(struct vhca_query_qp_out, sq_sig_all) == 97, "vhca_query_qp_out.sq_sig_all");
_Static_assert(offsetof(struct vhca_query_qp_out, rsvd0) == 98, "vhca_query_qp_out.rsvd0");
_Static_assert(offsetof(struct vhca_query_qp_out, pdn) == 100, "vhca_query_qp_out.pdn");
_Static_assert(offsetof(struct vhca_query_qp_out, send_cqn) == 104, "vhca_query_qp_out.send_cqn");
_Static_assert(offsetof(struct vhca_query_qp_out, recv_cqn) == 108, "vhca_query_qp_out.recv_cqn");
_Static_assert(offsetof(struct vhca_query_qp_out, srqn) == 112, "vhca_query_qp_out.srqn");
_Static_assert(offsetof(struct vhca_query_qp_out, rsvd1) == 116, "vhca_query_qp_out.rsvd1");
_Static_assert(offsetof(struct vhca_query_qp_out, alt) == 120, "vhca_query_qp_out.alt");

/* DESTROY_QP input. */
struct vhca_destroy_qp_in {
	__u32 qpn;
};
_Static_assert(sizeof(struct vhca_destroy_qp_in) == 4, "vhca_destroy_qp_in: size");
_Static_assert(offsetof(struct vhca_destroy_qp_in, qpn) == 0, "vhca_destroy_qp_in.qpn");

/* REG_MR input (mailbox). */
struct vhca_reg_mr_in {
	__u32 pdn;
	/* `VHCA_ACCESS_*`; remote write or atomic need local write (MP-04). */
	__u32 access;
	/* First virtual address; any byte alignment (MP-03). */
	__u64 iova;
	__u64 length;
	/* `VHCA_REG_MR_F_*`. */
	__u32 flags;
	__u32 rsvd;
	/*
	 * The pages spanned by [iova, iova + length), in order; the first holds iova
	 * at offset iova mod page size (MP-03).
	 */
	struct vhca_pbl pbl;
};
_Static_assert(sizeof(struct vhca_reg_mr_in) == 48, "vhca_reg_mr_in: size");
_Static_assert(offsetof(struct vhca_reg_mr_in, pdn) == 0, "vhca_reg_mr_in.pdn");
_Static_assert(offsetof(struct vhca_reg_mr_in, access) == 4, "vhca_reg_mr_in.access");
_Static_assert(offsetof(struct vhca_reg_mr_in, iova) == 8, "vhca_reg_mr_in.iova");
_Static_assert(offsetof(struct vhca_reg_mr_in, length) == 16, "vhca_reg_mr_in.length");
_Static_assert(offsetof(struct vhca_reg_mr_in, flags) == 24, "vhca_reg_mr_in.flags");
_Static_assert(offsetof(struct vhca_reg_mr_in, rsvd) == 28, "vhca_reg_mr_in.rsvd");
_Static_assert(offsetof(struct vhca_reg_mr_in, pbl) == 32, "vhca_reg_mr_in.pbl");

/*
 * REG_MR and REREG_MR output. L_Key = R_Key = (index << 8) | key byte
 * (MP-02).
 */
struct vhca_reg_mr_out {
	__u32 lkey;
	__u32 rkey;
};
_Static_assert(sizeof(struct vhca_reg_mr_out) == 8, "vhca_reg_mr_out: size");
_Static_assert(offsetof(struct vhca_reg_mr_out, lkey) == 0, "vhca_reg_mr_out.lkey");
_Static_assert(offsetof(struct vhca_reg_mr_out, rkey) == 4, "vhca_reg_mr_out.rkey");

/* REREG_MR input (mailbox): the fields `change` names replace the MR's. */
struct vhca_rereg_mr_in {
	__u32 lkey;
	/* `VHCA_REREG_*`. */
	__u32 change;
	__u32 pdn;
	__u32 access;
	__u64 iova;
	__u64 length;
	struct vhca_pbl pbl;
};
_Static_assert(sizeof(struct vhca_rereg_mr_in) == 48, "vhca_rereg_mr_in: size");
_Static_assert(offsetof(struct vhca_rereg_mr_in, lkey) == 0, "vhca_rereg_mr_in.lkey");
_Static_assert(offsetof(struct vhca_rereg_mr_in, change) == 4, "vhca_rereg_mr_in.change");
_Static_assert(offsetof(struct vhca_rereg_mr_in, pdn) == 8, "vhca_rereg_mr_in.pdn");
_Static_assert(offsetof(struct vhca_rereg_mr_in, access) == 12, "vhca_rereg_mr_in.access");
_Static_assert(offsetof(struct vhca_rereg_mr_in, iova) == 16, "vhca_rereg_mr_in.iova");
_Static_assert(offsetof(struct vhca_rereg_mr_in, length) == 24, "vhca_rereg_mr_in.length");
_Static_assert(offsetof(struct vhca_rereg_mr_in, pbl) == 32, "vhca_rereg_mr_in.pbl");

/* DEREG_MR input. */
struct vhca_dereg_mr_in {
	__u32 lkey;
};
_Static_assert(sizeof(struct vhca_dereg_mr_in) == 4, "vhca_dereg_mr_in: size");
_Static_assert(offsetof(struct vhca_dereg_mr_in, lkey) == 0, "vhca_dereg_mr_in.lkey");

/*
 * MAP_ODP input (mailbox): install the translations of `pbl.npages` 4 KiB
 * pages of ODP MR `lkey` from `va` on (replacing what was there), and restart
 * the work waiting on them.
 */
struct vhca_map_odp_in {
	__u32 lkey;
	__u32 rsvd;
	/* 4 KiB aligned, inside the MR. */
	__u64 va;
	/*
	 * page_shift 12 (`VHCA_ODP_PAGE_SHIFT`); the guest-physical (DMA) address of
	 * each page from `va` on; npages 1..=`VHCA_ODP_MAX_MAP_PAGES`.
	 */
	struct vhca_pbl pbl;
};
_Static_assert(sizeof(struct vhca_map_odp_in) == 32, "vhca_map_odp_in: size");
_Static_assert(offsetof(struct vhca_map_odp_in, lkey) == 0, "vhca_map_odp_in.lkey");
_Static_assert(offsetof(struct vhca_map_odp_in, rsvd) == 4, "vhca_map_odp_in.rsvd");
_Static_assert(offsetof(struct vhca_map_odp_in, va) == 8, "vhca_map_odp_in.va");
_Static_assert(offsetof(struct vhca_map_odp_in, pbl) == 16, "vhca_map_odp_in.pbl");

/*
 * UNMAP_ODP and ODP_FAULT_FAIL input: a range of ODP MR `lkey`, rounded out
 * to 4 KiB pages.
 */
struct vhca_unmap_odp_in {
	__u32 lkey;
	__u32 rsvd;
	__u64 va;
	__u64 length;
};
_Static_assert(sizeof(struct vhca_unmap_odp_in) == 24, "vhca_unmap_odp_in: size");
_Static_assert(offsetof(struct vhca_unmap_odp_in, lkey) == 0, "vhca_unmap_odp_in.lkey");
_Static_assert(offsetof(struct vhca_unmap_odp_in, rsvd) == 4, "vhca_unmap_odp_in.rsvd");
_Static_assert(offsetof(struct vhca_unmap_odp_in, va) == 8, "vhca_unmap_odp_in.va");
_Static_assert(offsetof(struct vhca_unmap_odp_in, length) == 16, "vhca_unmap_odp_in.length");

/*
 * ODP_FAULT_FAIL input: the pages the guest could not fault in (same layout
 * as `struct vhca_unmap_odp_in`).
 */
struct vhca_odp_fault_fail_in {
	__u32 lkey;
	__u32 rsvd;
	__u64 va;
	__u64 length;
};
_Static_assert(sizeof(struct vhca_odp_fault_fail_in) == 24, "vhca_odp_fault_fail_in: size");
_Static_assert(offsetof(struct vhca_odp_fault_fail_in, lkey) == 0, "vhca_odp_fault_fail_in.lkey");
_Static_assert(offsetof(struct vhca_odp_fault_fail_in, rsvd) == 4, "vhca_odp_fault_fail_in.rsvd");
_Static_assert(offsetof(struct vhca_odp_fault_fail_in, va) == 8, "vhca_odp_fault_fail_in.va");
_Static_assert(offsetof(struct vhca_odp_fault_fail_in, length) == 16, "vhca_odp_fault_fail_in.length");

/* ALLOC_MW input. */
struct vhca_alloc_mw_in {
	__u32 pdn;
	/* `enum vhca_mw_type`. */
	__u32 mw_type;
};
_Static_assert(sizeof(struct vhca_alloc_mw_in) == 8, "vhca_alloc_mw_in: size");
_Static_assert(offsetof(struct vhca_alloc_mw_in, pdn) == 0, "vhca_alloc_mw_in.pdn");
_Static_assert(offsetof(struct vhca_alloc_mw_in, mw_type) == 4, "vhca_alloc_mw_in.mw_type");

/*
 * ALLOC_MW output: the window's first R_Key, (index << 8) | key byte, in the
 * key space MRs use (MP-02). BIND_MW gives it a new key byte each time.
 */
struct vhca_alloc_mw_out {
	__u32 rkey;
};
_Static_assert(sizeof(struct vhca_alloc_mw_out) == 4, "vhca_alloc_mw_out: size");
_Static_assert(offsetof(struct vhca_alloc_mw_out, rkey) == 0, "vhca_alloc_mw_out.rkey");

/* DEALLOC_MW input: the window's current R_Key. */
struct vhca_dealloc_mw_in {
	__u32 rkey;
};
_Static_assert(sizeof(struct vhca_dealloc_mw_in) == 4, "vhca_dealloc_mw_in: size");
_Static_assert(offsetof(struct vhca_dealloc_mw_in, rkey) == 0, "vhca_dealloc_mw_in.rkey");

/*
 * ATTACH_MCAST and DETACH_MCAST input (`ibv_attach_mcast`): a UD QP and a
 * multicast group. On an InfiniBand port `mlid` is the group's multicast LID
 * (0xC000..=0xFFFE) and its packets must carry it; on a RoCE port it is zero
 * and `gid` is an IPv6 multicast address or an IPv4-mapped IPv4 multicast
 * address.
 */
struct vhca_mcast_in {
	__u32 qpn;
	__u16 mlid;
	/* Zero. */
	__u16 rsvd;
	/* The group's multicast GID (MGID), network order. */
	__u8 gid[16];
};
_Static_assert(sizeof(struct vhca_mcast_in) == 24, "vhca_mcast_in: size");
_Static_assert(offsetof(struct vhca_mcast_in, qpn) == 0, "vhca_mcast_in.qpn");
_Static_assert(offsetof(struct vhca_mcast_in, mlid) == 4, "vhca_mcast_in.mlid");
_Static_assert(offsetof(struct vhca_mcast_in, rsvd) == 6, "vhca_mcast_in.rsvd");
_Static_assert(offsetof(struct vhca_mcast_in, gid) == 8, "vhca_mcast_in.gid");

/* ALLOC_XRCD output. */
struct vhca_alloc_xrcd_out {
	__u32 xrcdn;
};
_Static_assert(sizeof(struct vhca_alloc_xrcd_out) == 4, "vhca_alloc_xrcd_out: size");
_Static_assert(offsetof(struct vhca_alloc_xrcd_out, xrcdn) == 0, "vhca_alloc_xrcd_out.xrcdn");

/* DEALLOC_XRCD input. */
struct vhca_dealloc_xrcd_in {
	__u32 xrcdn;
};
_Static_assert(sizeof(struct vhca_dealloc_xrcd_in) == 4, "vhca_dealloc_xrcd_in: size");
_Static_assert(offsetof(struct vhca_dealloc_xrcd_in, xrcdn) == 0, "vhca_dealloc_xrcd_in.xrcdn");

/* ALLOC_RDD output. */
struct vhca_alloc_rdd_out {
	__u32 rddn;
};
_Static_assert(sizeof(struct vhca_alloc_rdd_out) == 4, "vhca_alloc_rdd_out: size");
_Static_assert(offsetof(struct vhca_alloc_rdd_out, rddn) == 0, "vhca_alloc_rdd_out.rddn");

/* DEALLOC_RDD input. */
struct vhca_dealloc_rdd_in {
	__u32 rddn;
};
_Static_assert(sizeof(struct vhca_dealloc_rdd_in) == 4, "vhca_dealloc_rdd_in: size");
_Static_assert(offsetof(struct vhca_dealloc_rdd_in, rddn) == 0, "vhca_dealloc_rdd_in.rddn");

/* CREATE_EEC input. */
struct vhca_create_eec_in {
	/* The RD domain the EE context belongs to. */
	__u32 rddn;
};
_Static_assert(sizeof(struct vhca_create_eec_in) == 4, "vhca_create_eec_in: size");
_Static_assert(offsetof(struct vhca_create_eec_in, rddn) == 0, "vhca_create_eec_in.rddn");

/* CREATE_EEC output. */
struct vhca_create_eec_out {
	/* 24 bits, nonzero: what the peer's RDETH names. */
	__u32 eecn;
};
_Static_assert(sizeof(struct vhca_create_eec_out) == 4, "vhca_create_eec_out: size");
_Static_assert(offsetof(struct vhca_create_eec_out, eecn) == 0, "vhca_create_eec_out.eecn");

/* MODIFY_EEC input (mailbox). */
struct vhca_modify_eec_in {
	__u32 eecn;
	/* Zero. */
	__u32 rsvd;
	struct vhca_eec_attr attr;
};
_Static_assert(sizeof(struct vhca_modify_eec_in) == 72, "vhca_modify_eec_in: size");
_Static_assert(offsetof(struct vhca_modify_eec_in, eecn) == 0, "vhca_modify_eec_in.eecn");
_Static_assert(offsetof(struct vhca_modify_eec_in, rsvd) == 4, "vhca_modify_eec_in.rsvd");
_Static_assert(offsetof(struct vhca_modify_eec_in, attr) == 8, "vhca_modify_eec_in.attr");

/* QUERY_EEC input. */
struct vhca_query_eec_in {
	__u32 eecn;
};
_Static_assert(sizeof(struct vhca_query_eec_in) == 4, "vhca_query_eec_in: size");
_Static_assert(offsetof(struct vhca_query_eec_in, eecn) == 0, "vhca_query_eec_in.eecn");

/* QUERY_EEC output (mailbox). */
struct vhca_query_eec_out {
	__u32 rddn;
	/* Zero. */
	__u32 rsvd;
	struct vhca_eec_attr attr;
};
_Static_assert(sizeof(struct vhca_query_eec_out) == 72, "vhca_query_eec_out: size");
_Static_assert(offsetof(struct vhca_query_eec_out, rddn) == 0, "vhca_query_eec_out.rddn");
_Static_assert(offsetof(struct vhca_query_eec_out, rsvd) == 4, "vhca_query_eec_out.rsvd");
_Static_assert(offsetof(struct vhca_query_eec_out, attr) == 8, "vhca_query_eec_out.attr");

/* DESTROY_EEC input. */
struct vhca_destroy_eec_in {
	__u32 eecn;
};
_Static_assert(sizeof(struct vhca_destroy_eec_in) == 4, "vhca_destroy_eec_in: size");
_Static_assert(offsetof(struct vhca_destroy_eec_in, eecn) == 0, "vhca_destroy_eec_in.eecn");

/*
 * Commands: opcode, input, output.
 * VHCA_CMD_NOP: in -; out -.
 * VHCA_CMD_QUERY_DEVICE: in -; out struct vhca_device_attr (mailbox).
 * VHCA_CMD_QUERY_PORT: in struct vhca_query_port_in (inline); out struct
 *     vhca_port_attr (mailbox).
 * VHCA_CMD_QUERY_COUNTERS: in struct vhca_query_counters_in (inline); out
 *     struct vhca_query_counters_out (mailbox).
 * VHCA_CMD_SET_GID: in struct vhca_set_gid_in (inline); out -.
 * VHCA_CMD_MAD_IFC: in struct vhca_mad_ifc_in (mailbox); out struct
 *     vhca_mad_ifc_out (mailbox).
 * VHCA_CMD_SET_PORT_CAPS: in struct vhca_set_port_caps_in (inline); out
 *     struct vhca_set_port_caps_out (inline).
 * VHCA_CMD_SET_NODE_DESC: in struct vhca_set_node_desc_in (mailbox); out
 *     -.
 * VHCA_CMD_ALLOC_PD: in -; out struct vhca_alloc_pd_out (inline).
 * VHCA_CMD_DEALLOC_PD: in struct vhca_dealloc_pd_in (inline); out -.
 * VHCA_CMD_CREATE_EQ: in struct vhca_create_eq_in (inline); out struct
 *     vhca_create_eq_out (inline).
 * VHCA_CMD_DESTROY_EQ: in struct vhca_destroy_eq_in (inline); out -.
 * VHCA_CMD_CREATE_CQ: in struct vhca_create_cq_in (inline); out struct
 *     vhca_create_cq_out (inline).
 * VHCA_CMD_DESTROY_CQ: in struct vhca_destroy_cq_in (inline); out -.
 * VHCA_CMD_RESIZE_CQ: in struct vhca_resize_cq_in (inline); out struct
 *     vhca_resize_cq_out (inline).
 * VHCA_CMD_CREATE_SRQ: in struct vhca_create_srq_in (mailbox); out struct
 *     vhca_create_srq_out (inline).
 * VHCA_CMD_MODIFY_SRQ: in struct vhca_modify_srq_in (inline); out -.
 * VHCA_CMD_QUERY_SRQ: in struct vhca_query_srq_in (inline); out struct
 *     vhca_query_srq_out (inline).
 * VHCA_CMD_DESTROY_SRQ: in struct vhca_destroy_srq_in (inline); out -.
 * VHCA_CMD_RESIZE_SRQ: in struct vhca_resize_srq_in (inline); out struct
 *     vhca_resize_srq_out (inline).
 * VHCA_CMD_CREATE_QP: in struct vhca_create_qp_in (mailbox); out struct
 *     vhca_create_qp_out (inline).
 * VHCA_CMD_MODIFY_QP: in struct vhca_modify_qp_in (mailbox); out -.
 * VHCA_CMD_QUERY_QP: in struct vhca_query_qp_in (inline); out struct
 *     vhca_query_qp_out (mailbox).
 * VHCA_CMD_DESTROY_QP: in struct vhca_destroy_qp_in (inline); out -.
 * VHCA_CMD_REG_MR: in struct vhca_reg_mr_in (mailbox); out struct
 *     vhca_reg_mr_out (inline).
 * VHCA_CMD_REREG_MR: in struct vhca_rereg_mr_in (mailbox); out struct
 *     vhca_reg_mr_out (inline).
 * VHCA_CMD_DEREG_MR: in struct vhca_dereg_mr_in (inline); out -.
 * VHCA_CMD_MAP_ODP: in struct vhca_map_odp_in (inline); out -.
 * VHCA_CMD_UNMAP_ODP: in struct vhca_unmap_odp_in (inline); out -.
 * VHCA_CMD_ODP_FAULT_FAIL: in struct vhca_odp_fault_fail_in (inline); out
 *     -.
 * VHCA_CMD_ALLOC_MW: in struct vhca_alloc_mw_in (inline); out struct
 *     vhca_alloc_mw_out (inline).
 * VHCA_CMD_DEALLOC_MW: in struct vhca_dealloc_mw_in (inline); out -.
 * VHCA_CMD_ATTACH_MCAST: in struct vhca_mcast_in (inline); out -.
 * VHCA_CMD_DETACH_MCAST: in struct vhca_mcast_in (inline); out -.
 * VHCA_CMD_ALLOC_XRCD: in -; out struct vhca_alloc_xrcd_out (inline).
 * VHCA_CMD_DEALLOC_XRCD: in struct vhca_dealloc_xrcd_in (inline); out -.
 * VHCA_CMD_ALLOC_RDD: in -; out struct vhca_alloc_rdd_out (inline).
 * VHCA_CMD_DEALLOC_RDD: in struct vhca_dealloc_rdd_in (inline); out -.
 * VHCA_CMD_CREATE_EEC: in struct vhca_create_eec_in (inline); out struct
 *     vhca_create_eec_out (inline).
 * VHCA_CMD_MODIFY_EEC: in struct vhca_modify_eec_in (mailbox); out -.
 * VHCA_CMD_QUERY_EEC: in struct vhca_query_eec_in (inline); out struct
 *     vhca_query_eec_out (mailbox).
 * VHCA_CMD_DESTROY_EEC: in struct vhca_destroy_eec_in (inline); out -.
 */
#define VHCA_CMD_IN_MAILBOX(type) (sizeof(type) > VHCA_CMD_INLINE_SIZE)

/* The errno (negative) of a command status; 0 for VHCA_STATUS_OK. */
static inline int vhca_status_errno(unsigned int status)
{
	switch (status) {
	case VHCA_STATUS_OK:
		return 0;
	case VHCA_STATUS_BAD_OPCODE:
		return -EOPNOTSUPP;
	case VHCA_STATUS_BAD_PARAM:
		return -EINVAL;
	case VHCA_STATUS_BAD_STATE:
		return -EINVAL;
	case VHCA_STATUS_NO_RESOURCES:
		return -ENOMEM;
	case VHCA_STATUS_NOT_FOUND:
		return -ENOENT;
	case VHCA_STATUS_BAD_PD:
		return -EINVAL;
	case VHCA_STATUS_BAD_CQ:
		return -EINVAL;
	case VHCA_STATUS_BAD_SRQ:
		return -EINVAL;
	case VHCA_STATUS_LIMIT_EXCEEDED:
		return -EINVAL;
	case VHCA_STATUS_BUSY:
		return -EBUSY;
	case VHCA_STATUS_NOT_SUPPORTED:
		return -EOPNOTSUPP;
	case VHCA_STATUS_PERMISSION:
		return -EPERM;
	case VHCA_STATUS_BAD_ADDRESS:
		return -EFAULT;
	case VHCA_STATUS_AGAIN:
		return -EAGAIN;
	default:
		return -EIO;
	}
}

/* ================ Work queue entries (SQ, RQ, SRQ rings) ================ */

/*
 * Work queue entries. A ring holds 2^log2_size WQEs of 2^wqe_shift bytes each
 * (the stride, fixed per queue at create time); WQE i (free-running producer
 * index) is at byte (i mod size) * stride of the ring's page list. Send
 * strides are 64-byte basic blocks (VHCA_SQ_MIN_WQE_SHIFT); receive strides
 * start at 32 bytes. A WQE is valid because the producer index in the
 * doorbell slot covers it; it has no owner bit.
 *
 * Send WQE, in this order: struct vhca_send_ctrl; then, on a UD or GSI QP,
 * struct vhca_ud_seg, on an XRC_INI QP, struct vhca_xrc_seg, on an RD QP,
 * struct vhca_rd_seg; then for RDMA_WRITE, RDMA_WRITE_WITH_IMM and RDMA_READ
 * a struct vhca_raddr_seg, and for ATOMIC_CMP_SWAP and ATOMIC_FETCH_ADD a
 * struct vhca_raddr_seg followed by a struct vhca_atomic_seg; for FLUSH and
 * ATOMIC_WRITE (IBA 1.5 Memory Placement Extensions, RC only, ctrl.len = 0,
 * no data) a struct vhca_raddr_seg followed by a struct vhca_atomic_seg whose
 * compare_add is the FLUSH's length or the 8 bytes the ATOMIC WRITE stores
 * (FLUSH: ctrl.imm_or_inv = placement type | selectivity level << 4); for
 * BIND_MW a struct vhca_bind_seg (ctrl.len = 0, ctrl.imm_or_inv = the
 * window's current R_Key); for REG_MR a struct vhca_reg_mr_seg (ctrl.len = 0,
 * ctrl.imm_or_inv = the MR's key after the registration: the index of a
 * fast-registration MR, a new key byte); LOCAL_INV has the control segment
 * only (ctrl.len = 0, ctrl.imm_or_inv = the R_Key to invalidate); then the
 * data: ctrl.len SGEs (struct vhca_sge), or, with VHCA_SEND_INLINE, ctrl.len
 * bytes of inline data. Everything must fit in the stride: a WQE that does
 * not, an unknown opcode, or an opcode the QP's service does not allow
 * completes with an error CQE (VHCA_WC_LOC_QP_OP_ERR) and never crashes the
 * device (ARCHITECTURE.md §2, §9).
 *
 * Receive WQE (RQ and SRQ): struct vhca_recv_ctrl, then num_sge SGEs. For UD,
 * the first 40 bytes of the buffers receive the GRH (undefined when the CQE
 * has no GRH flag), as ibverbs expects.
 */

/* WQE strides. */
/*
 * Smallest send stride: one 64-byte basic block (control + UD segment, or
 * control + remote address + two SGEs).
 */
#define VHCA_SQ_MIN_WQE_SHIFT 6U
/* Smallest receive stride: 32 bytes (control + one SGE). */
#define VHCA_RQ_MIN_WQE_SHIFT 5U
/*
 * Largest stride for both: 4 KiB (room for 32 SGEs or 256 bytes inline with
 * every header).
 */
#define VHCA_MAX_WQE_SHIFT    12U
/* Bytes before the data of a UD send WQE. */
#define VHCA_UD_HEADERS_SIZE  64U
/*
 * Bytes of the GRH at the start of a UD receive buffer (`struct ibv_grh`).
 */
#define VHCA_UD_GRH_SIZE      40U

/* Send WQE control segment (every send WQE starts with it). */
struct vhca_send_ctrl {
	/* Returned in the CQE. */
	__u64 wr_id;
	/* `enum vhca_wr_opcode` (`ibv_wr_opcode`). */
	__u8 opcode;
	/* `VHCA_SEND_*` (`ibv_send_flags` bits). */
	__u8 flags;
	/* SGE count, or bytes of inline data with VHCA_SEND_INLINE. */
	__u16 len;
	/*
	 * Immediate data (WITH_IMM opcodes) as a number: the provider stores
	 * be32toh(wr.imm_data) and the device sends it big-endian in ImmDt, so the
	 * bytes arrive as posted. SEND_WITH_INV: wr.invalidate_rkey as is.
	 */
	__u32 imm_or_inv;
};
_Static_assert(sizeof(struct vhca_send_ctrl) == 16, "vhca_send_ctrl: size");
_Static_assert(offsetof(struct vhca_send_ctrl, wr_id) == 0, "vhca_send_ctrl.wr_id");
_Static_assert(offsetof(struct vhca_send_ctrl, opcode) == 8, "vhca_send_ctrl.opcode");
_Static_assert(offsetof(struct vhca_send_ctrl, flags) == 9, "vhca_send_ctrl.flags");
_Static_assert(offsetof(struct vhca_send_ctrl, len) == 10, "vhca_send_ctrl.len");
_Static_assert(offsetof(struct vhca_send_ctrl, imm_or_inv) == 12, "vhca_send_ctrl.imm_or_inv");

/* UD destination segment (AD-02; UD and GSI QPs). */
struct vhca_ud_seg {
	/* Destination QP (24 bits). */
	__u32 remote_qpn;
	/* Q_Key; one with the high bit set means "use the QP's" (PV-05). */
	__u32 remote_qkey;
	/* Where to. */
	struct vhca_av av;
};
_Static_assert(sizeof(struct vhca_ud_seg) == 48, "vhca_ud_seg: size");
_Static_assert(offsetof(struct vhca_ud_seg, remote_qpn) == 0, "vhca_ud_seg.remote_qpn");
_Static_assert(offsetof(struct vhca_ud_seg, remote_qkey) == 4, "vhca_ud_seg.remote_qkey");
_Static_assert(offsetof(struct vhca_ud_seg, av) == 8, "vhca_ud_seg.av");

/*
 * XRC segment (XRC_INI QPs, SR-02; `ibv_send_wr.qp_type.xrc.remote_srqn`):
 * the XRC SRQ of the target node the WQE's message goes to (XRCETH, WF-06).
 */
struct vhca_xrc_seg {
	/* 24 bits. */
	__u32 remote_srqn;
	__u8 rsvd[12];
};
_Static_assert(sizeof(struct vhca_xrc_seg) == 16, "vhca_xrc_seg: size");
_Static_assert(offsetof(struct vhca_xrc_seg, remote_srqn) == 0, "vhca_xrc_seg.remote_srqn");
_Static_assert(offsetof(struct vhca_xrc_seg, rsvd) == 4, "vhca_xrc_seg.rsvd");

/*
 * RD segment (RD QPs, AD-11): the local EE context that carries the message,
 * the destination QP and the Q_Key it checks (a Q_Key with bit 31 set means
 * the QP's own, as UD).
 */
struct vhca_rd_seg {
	/* 24 bits. */
	__u32 eecn;
	/* 24 bits. */
	__u32 remote_qpn;
	__u32 remote_qkey;
	__u32 rsvd;
};
_Static_assert(sizeof(struct vhca_rd_seg) == 16, "vhca_rd_seg: size");
_Static_assert(offsetof(struct vhca_rd_seg, eecn) == 0, "vhca_rd_seg.eecn");
_Static_assert(offsetof(struct vhca_rd_seg, remote_qpn) == 4, "vhca_rd_seg.remote_qpn");
_Static_assert(offsetof(struct vhca_rd_seg, remote_qkey) == 8, "vhca_rd_seg.remote_qkey");
_Static_assert(offsetof(struct vhca_rd_seg, rsvd) == 12, "vhca_rd_seg.rsvd");

/* Remote address segment (RDMA and ATOMIC). */
struct vhca_raddr_seg {
	__u64 remote_addr;
	__u32 rkey;
	__u32 rsvd;
};
_Static_assert(sizeof(struct vhca_raddr_seg) == 16, "vhca_raddr_seg: size");
_Static_assert(offsetof(struct vhca_raddr_seg, remote_addr) == 0, "vhca_raddr_seg.remote_addr");
_Static_assert(offsetof(struct vhca_raddr_seg, rkey) == 8, "vhca_raddr_seg.rkey");
_Static_assert(offsetof(struct vhca_raddr_seg, rsvd) == 12, "vhca_raddr_seg.rsvd");

/* Atomic segment (ibverbs' `wr.atomic`, OP-07). */
struct vhca_atomic_seg {
	/* CmpSwap: the compare value; FetchAdd: the value to add. */
	__u64 compare_add;
	/* CmpSwap: the swap value; FetchAdd: ignored. */
	__u64 swap;
};
_Static_assert(sizeof(struct vhca_atomic_seg) == 16, "vhca_atomic_seg: size");
_Static_assert(offsetof(struct vhca_atomic_seg, compare_add) == 0, "vhca_atomic_seg.compare_add");
_Static_assert(offsetof(struct vhca_atomic_seg, swap) == 8, "vhca_atomic_seg.swap");

/*
 * Memory window bind segment (BIND_MW; MP-06, MP-07; `struct
 * ibv_mw_bind_info` plus the new R_Key). The window is named by
 * ctrl.imm_or_inv. A type 1 bind of length 0 unbinds the window. The bind
 * completes with opcode BIND_MW, or with VHCA_WC_MW_BIND_ERR when a rule of
 * IBA 10.6.7 is broken.
 */
struct vhca_bind_seg {
	/* First virtual address of the window, inside the MR. */
	__u64 addr;
	__u64 length;
	/* The MR the window is bound to; it needs VHCA_ACCESS_MW_BIND. */
	__u32 mr_lkey;
	/*
	 * The window's R_Key after the bind: same index, new key byte (the
	 * provider's choice, as ibv_inc_rkey).
	 */
	__u32 new_rkey;
	/* `VHCA_ACCESS_REMOTE_*` rights the window grants. */
	__u32 access;
	__u32 rsvd;
};
_Static_assert(sizeof(struct vhca_bind_seg) == 32, "vhca_bind_seg: size");
_Static_assert(offsetof(struct vhca_bind_seg, addr) == 0, "vhca_bind_seg.addr");
_Static_assert(offsetof(struct vhca_bind_seg, length) == 8, "vhca_bind_seg.length");
_Static_assert(offsetof(struct vhca_bind_seg, mr_lkey) == 16, "vhca_bind_seg.mr_lkey");
_Static_assert(offsetof(struct vhca_bind_seg, new_rkey) == 20, "vhca_bind_seg.new_rkey");
_Static_assert(offsetof(struct vhca_bind_seg, access) == 24, "vhca_bind_seg.access");
_Static_assert(offsetof(struct vhca_bind_seg, rsvd) == 28, "vhca_bind_seg.rsvd");

/*
 * Fast-registration segment (REG_MR; MP-08; the kernel's `struct ib_reg_wr`
 * over the page list `ib_map_mr_sg` built). The MR is named by the index of
 * ctrl.imm_or_inv, which is also its key afterwards; it must have been
 * allocated with VHCA_REG_MR_F_FAST, belong to the QP's PD and be free (never
 * registered, or invalidated since). The page list is read when the device
 * reaches the WQE in send-queue order (earlier WQEs sent, not necessarily
 * acknowledged; with VHCA_SEND_FENCE once every earlier WQE has completed),
 * and WQEs after it see the registration; the list must stay unchanged until
 * the REG_MR completes. Completes with opcode REG_MR; with
 * VHCA_WC_LOC_PROT_ERR when the MR, its PD, its state or the rights are
 * wrong, with VHCA_WC_LOC_QP_OP_ERR when the translation is (MP-03).
 */
struct vhca_reg_mr_seg {
	/*
	 * First virtual address; any byte alignment (offset in the first page).
	 */
	__u64 iova;
	__u64 length;
	/*
	 * Guest-physical address of `npages` little-endian 64-bit page addresses,
	 * each aligned to the page size, covering exactly [iova, iova + length);
	 * 8-byte aligned.
	 */
	__u64 page_list;
	/* 1..=the MR's max_pages (at most QUERY_DEVICE's max_fast_reg_pages). */
	__u32 npages;
	/* `VHCA_ACCESS_*`; remote write or atomic need local write (MP-04). */
	__u32 access;
	/* log2 of the page size: VHCA_PBL_MIN_PAGE_SHIFT..=30. */
	__u32 page_shift;
	__u32 rsvd;
};
_Static_assert(sizeof(struct vhca_reg_mr_seg) == 40, "vhca_reg_mr_seg: size");
_Static_assert(offsetof(struct vhca_reg_mr_seg, iova) == 0, "vhca_reg_mr_seg.iova");
_Static_assert(offsetof(struct vhca_reg_mr_seg, length) == 8, "vhca_reg_mr_seg.length");
_Static_assert(offsetof(struct vhca_reg_mr_seg, page_list) == 16, "vhca_reg_mr_seg.page_list");
_Static_assert(offsetof(struct vhca_reg_mr_seg, npages) == 24, "vhca_reg_mr_seg.npages");
_Static_assert(offsetof(struct vhca_reg_mr_seg, access) == 28, "vhca_reg_mr_seg.access");
_Static_assert(offsetof(struct vhca_reg_mr_seg, page_shift) == 32, "vhca_reg_mr_seg.page_shift");
_Static_assert(offsetof(struct vhca_reg_mr_seg, rsvd) == 36, "vhca_reg_mr_seg.rsvd");

/* Scatter/gather element: `length` bytes at `addr` of the MR of `lkey`. */
struct vhca_sge {
	__u64 addr;
	__u32 length;
	__u32 lkey;
};
_Static_assert(sizeof(struct vhca_sge) == 16, "vhca_sge: size");
_Static_assert(offsetof(struct vhca_sge, addr) == 0, "vhca_sge.addr");
_Static_assert(offsetof(struct vhca_sge, length) == 8, "vhca_sge.length");
_Static_assert(offsetof(struct vhca_sge, lkey) == 12, "vhca_sge.lkey");

/* Receive WQE control segment (RQ and SRQ). */
struct vhca_recv_ctrl {
	/* Returned in the CQE. */
	__u64 wr_id;
	/* SGEs that follow. */
	__u32 num_sge;
	__u32 rsvd;
};
_Static_assert(sizeof(struct vhca_recv_ctrl) == 16, "vhca_recv_ctrl: size");
_Static_assert(offsetof(struct vhca_recv_ctrl, wr_id) == 0, "vhca_recv_ctrl.wr_id");
_Static_assert(offsetof(struct vhca_recv_ctrl, num_sge) == 8, "vhca_recv_ctrl.num_sge");
_Static_assert(offsetof(struct vhca_recv_ctrl, rsvd) == 12, "vhca_recv_ctrl.rsvd");

/* ================== Completion and event queue entries ================== */

/*
 * Owner bit (CQs and EQs). A ring has N = 2^log2 entries and is zeroed by the
 * driver before CREATE_CQ / CREATE_EQ (or before ENABLE for EQ 0). The device
 * writes its k-th entry (k = 0, 1, 2, ... free-running) into slot k mod N
 * with owner bit (VHCA_OWNER_BIT) = 1 - ((k / N) mod 2): 1 on the first pass
 * over the ring, 0 on the second, 1 on the third, and so on. The consumer, at
 * free-running consumer index ci, owns the entry in slot ci mod N iff its
 * owner bit equals 1 - ((ci / N) mod 2); otherwise the ring is empty there (a
 * zeroed slot on the first pass, or last pass's entry). The device writes all
 * other bytes of the entry first and the owner byte last, with release
 * ordering; the consumer reads the owner byte, then a read barrier (dma_rmb /
 * udma_from_device_barrier), then the rest. The device never overwrites an
 * entry the consumer has not released: it reads the consumer index from the
 * queue's doorbell slot; a CQ that would overflow gets a CQ_ERR event
 * (CQ-03), EQ 0 a fatal stop.
 */

/* Completion and event entry constants. */
/*
 * Bytes per CQE: a cache line, room for every `ibv_wc` field without bit
 * packing.
 */
#define VHCA_CQE_SIZE  64U
/* Bytes per EQE. */
#define VHCA_EQE_SIZE  16U
/* The owner bit in the `owner` byte of a CQE or EQE. */
#define VHCA_OWNER_BIT (1U << 0)

/* Completion queue entry (`struct ibv_wc`; CQ-01). */
struct vhca_cqe {
	/* The WQE's wr_id. */
	__u64 wr_id;
	/*
	 * Bytes received (receive completions; UD includes the 40-byte GRH space) or
	 * transferred (RDMA READ, atomics).
	 */
	__u32 byte_len;
	/*
	 * Immediate data (VHCA_WC_FLAG_WITH_IMM), as a number (the provider gives
	 * htobe32 of it to ibverbs), or the invalidated R_Key (WITH_INV).
	 */
	__u32 imm_or_inv;
	/* The QP the WQE belongs to. */
	__u32 qp_num;
	/* UD/GSI receives: the sender's QPN. */
	__u32 src_qp;
	/* Device detail of an error status (0 on success; not ABI). */
	__u32 vendor_err;
	/* `VHCA_WC_FLAG_*` (`ibv_wc_flags` bits). */
	__u32 wc_flags;
	/* UD/GSI receives: the sender's LID. */
	__u16 slid;
	/* GSI receives: P_Key index the packet matched. */
	__u16 pkey_index;
	/* `enum vhca_wc_status` (`ibv_wc_status`). */
	__u8 status;
	/* `enum vhca_wc_opcode` (`ibv_wc_opcode`); valid for errors too. */
	__u8 opcode;
	/* UD/GSI receives: the packet's SL. */
	__u8 sl;
	/* UD/GSI receives: the DLID's path bits (AD-01). */
	__u8 dlid_path_bits;
	/* RoCE UD/GSI receives: the source MAC of the frame. */
	__u8 smac[6];
	/*
	 * RoCE UD/GSI receives: `enum vhca_network_hdr` — what the first 40 bytes
	 * of the receive buffer hold: IB = a GRH, IPV4 = 20 zero bytes and the
	 * frame's IPv4 header, IPV6 = the frame's IPv6 header (the layout of the
	 * kernel's `union rdma_network_hdr`).
	 */
	__u8 network_hdr_type;
	__u8 rsvd0;
	/*
	 * Receives into an XRC SRQ (SR-02): its number, since `qp_num` is an XRC TGT
	 * QP the consumer may not know; else zero.
	 */
	__u32 srqn;
	__u8 rsvd[11];
	/* Owner bit (VHCA_OWNER_BIT), written last. */
	__u8 owner;
};
_Static_assert(sizeof(struct vhca_cqe) == 64, "vhca_cqe: size");
_Static_assert(offsetof(struct vhca_cqe, wr_id) == 0, "vhca_cqe.wr_id");
_Static_assert(offsetof(struct vhca_cqe, byte_len) == 8, "vhca_cqe.byte_len");
_Static_assert(offsetof(struct vhca_cqe, imm_or_inv) == 12, "vhca_cqe.imm_or_inv");
_Static_assert(offsetof(struct vhca_cqe, qp_num) == 16, "vhca_cqe.qp_num");
_Static_assert(offsetof(struct vhca_cqe, src_qp) == 20, "vhca_cqe.src_qp");
_Static_assert(offsetof(struct vhca_cqe, vendor_err) == 24, "vhca_cqe.vendor_err");
_Static_assert(offsetof(struct vhca_cqe, wc_flags) == 28, "vhca_cqe.wc_flags");
_Static_assert(offsetof(struct vhca_cqe, slid) == 32, "vhca_cqe.slid");
_Static_assert(offsetof(struct vhca_cqe, pkey_index) == 34, "vhca_cqe.pkey_index");
_Static_assert(offsetof(struct vhca_cqe, status) == 36, "vhca_cqe.status");
_Static_assert(offsetof(struct vhca_cqe, opcode) == 37, "vhca_cqe.opcode");
_Static_assert(offsetof(struct vhca_cqe, sl) == 38, "vhca_cqe.sl");
_Static_assert(offsetof(struct vhca_cqe, dlid_path_bits) == 39, "vhca_cqe.dlid_path_bits");
_Static_assert(offsetof(struct vhca_cqe, smac) == 40, "vhca_cqe.smac");
_Static_assert(offsetof(struct vhca_cqe, network_hdr_type) == 46, "vhca_cqe.network_hdr_type");
_Static_assert(offsetof(struct vhca_cqe, rsvd0) == 47, "vhca_cqe.rsvd0");
_Static_assert(offsetof(struct vhca_cqe, srqn) == 48, "vhca_cqe.srqn");
_Static_assert(offsetof(struct vhca_cqe, rsvd) == 52, "vhca_cqe.rsvd");
_Static_assert(offsetof(struct vhca_cqe, owner) == 63, "vhca_cqe.owner");

/*
 * Network header types of a receive completion (`enum rdma_network_type`).
 */
enum vhca_network_hdr {
	/* A GRH (or nothing: WC flag GRH clear). */
	VHCA_NETWORK_HDR_IB = 0,
	/* RoCEv2 over IPv4. */
	VHCA_NETWORK_HDR_IPV4 = 2,
	/* RoCEv2 over IPv6. */
	VHCA_NETWORK_HDR_IPV6 = 3,
};

/*
 * EQE types: asynchronous events numbered as `enum ibv_event_type` (and the
 * kernel's `enum ib_event_type`, the same numbers), then the two kinds of
 * notification.
 */
enum vhca_eqe_type {
	/* object = CQN (CQ-03 overflow). */
	VHCA_EQE_CQ_ERR = 0,
	/* object = QPN. */
	VHCA_EQE_QP_FATAL = 1,
	/* object = QPN. */
	VHCA_EQE_QP_REQ_ERR = 2,
	/* object = QPN. */
	VHCA_EQE_QP_ACCESS_ERR = 3,
	/* object = QPN (QS-08). */
	VHCA_EQE_COMM_EST = 4,
	/* object = QPN (QS-05). */
	VHCA_EQE_SQ_DRAINED = 5,
	/* object = QPN (AD-10). */
	VHCA_EQE_PATH_MIG = 6,
	/*
	 * object = QPN: a MigReq on the QP's alternate path while it was not Armed,
	 * so the migration the peer asked for failed (AD-10).
	 */
	VHCA_EQE_PATH_MIG_ERR = 7,
	/* object = 0. */
	VHCA_EQE_DEVICE_FATAL = 8,
	/* object = port. */
	VHCA_EQE_PORT_ACTIVE = 9,
	/* object = port. */
	VHCA_EQE_PORT_ERR = 10,
	/* object = port. */
	VHCA_EQE_LID_CHANGE = 11,
	/* object = port. */
	VHCA_EQE_PKEY_CHANGE = 12,
	/* object = port. */
	VHCA_EQE_SM_CHANGE = 13,
	/* object = SRQN. */
	VHCA_EQE_SRQ_ERR = 14,
	/* object = SRQN (SR-01). */
	VHCA_EQE_SRQ_LIMIT_REACHED = 15,
	/* object = QPN. */
	VHCA_EQE_QP_LAST_WQE_REACHED = 16,
	/* object = port. */
	VHCA_EQE_CLIENT_REREGISTER = 17,
	/* object = port. */
	VHCA_EQE_GID_CHANGE = 18,
	/* object = QPN (WQ); not sent. */
	VHCA_EQE_WQ_FATAL = 19,
	/* An armed CQ has a completion for it (CQ-02): object = CQN. */
	VHCA_EQE_COMPLETION = 0x80,
	/*
	 * A command with VHCA_CMD_F_EVENT completed (EQ 0 only): object = its token,
	 * data = its status.
	 */
	VHCA_EQE_COMMAND_DONE = 0x81,
	/*
	 * An ODP MR's pages are not present (issue 29): the entry is a `struct
	 * vhca_eqe_page_fault`. On EQ 0.
	 */
	VHCA_EQE_PAGE_FAULT = 0x82,
};

/* Event queue entry. */
struct vhca_eqe {
	/* `enum vhca_eqe_type`. */
	__u8 kind;
	__u8 rsvd0;
	__u16 rsvd1;
	/* CQN, QPN, SRQN, port or command token, per `kind`. */
	__u32 object;
	/* COMMAND_DONE: the status; otherwise 0. */
	__u32 data;
	__u8 rsvd2[3];
	/* Owner bit (VHCA_OWNER_BIT), written last. */
	__u8 owner;
};
_Static_assert(sizeof(struct vhca_eqe) == 16, "vhca_eqe: size");
_Static_assert(offsetof(struct vhca_eqe, kind) == 0, "vhca_eqe.kind");
_Static_assert(offsetof(struct vhca_eqe, rsvd0) == 1, "vhca_eqe.rsvd0");
_Static_assert(offsetof(struct vhca_eqe, rsvd1) == 2, "vhca_eqe.rsvd1");
_Static_assert(offsetof(struct vhca_eqe, object) == 4, "vhca_eqe.object");
_Static_assert(offsetof(struct vhca_eqe, data) == 8, "vhca_eqe.data");
_Static_assert(offsetof(struct vhca_eqe, rsvd2) == 12, "vhca_eqe.rsvd2");
_Static_assert(offsetof(struct vhca_eqe, owner) == 15, "vhca_eqe.owner");

/* `struct vhca_eqe_page_fault` `flags`. */
/* The device needs to write the pages (else only read them). */
#define VHCA_PAGE_FAULT_WRITE        (1 << 0)
/*
 * Raised by an incoming request (responder); else by the QP's own send queue
 * (requester).
 */
#define VHCA_PAGE_FAULT_RESPONDER    (1 << 1)
/* Unused (0). */
#define VHCA_PAGE_FAULT_PREFETCHABLE (1 << 2)

/*
 * A PAGE_FAULT event (`kind` = `VHCA_EQE_PAGE_FAULT`; issue 29): `npages` 4
 * KiB pages from `vpn` on of the ODP MR `key` are not present. The guest
 * answers with MAP_ODP covering them, or ODP_FAULT_FAIL. The device raises at
 * most one fault per (QP, key, page range) until it is resolved (MAP_ODP,
 * ODP_FAULT_FAIL, the QP destroyed or in Error).
 */
struct vhca_eqe_page_fault {
	/* `VHCA_EQE_PAGE_FAULT`. */
	__u8 kind;
	/* `VHCA_PAGE_FAULT_*`. */
	__u8 flags;
	/* Pages from `vpn` on (>= 1). */
	__u16 npages;
	/* The MR's L_Key / R_Key. */
	__u32 key;
	/* vpn = va >> 12, 48 bits: the low 32. */
	__u32 vpn_lo;
	/* The high 16 bits of vpn. */
	__u16 vpn_hi;
	__u8 rsvd;
	/* Owner bit (VHCA_OWNER_BIT), written last. */
	__u8 owner;
};
_Static_assert(sizeof(struct vhca_eqe_page_fault) == 16, "vhca_eqe_page_fault: size");
_Static_assert(offsetof(struct vhca_eqe_page_fault, kind) == 0, "vhca_eqe_page_fault.kind");
_Static_assert(offsetof(struct vhca_eqe_page_fault, flags) == 1, "vhca_eqe_page_fault.flags");
_Static_assert(offsetof(struct vhca_eqe_page_fault, npages) == 2, "vhca_eqe_page_fault.npages");
_Static_assert(offsetof(struct vhca_eqe_page_fault, key) == 4, "vhca_eqe_page_fault.key");
_Static_assert(offsetof(struct vhca_eqe_page_fault, vpn_lo) == 8, "vhca_eqe_page_fault.vpn_lo");
_Static_assert(offsetof(struct vhca_eqe_page_fault, vpn_hi) == 12, "vhca_eqe_page_fault.vpn_hi");
_Static_assert(offsetof(struct vhca_eqe_page_fault, rsvd) == 14, "vhca_eqe_page_fault.rsvd");
_Static_assert(offsetof(struct vhca_eqe_page_fault, owner) == 15, "vhca_eqe_page_fault.owner");

/* ================= Context-table records (BAR0 window) ================== */

/*
 * Context record flag bits (`flags` of the CQ, SRQ, MR and EQ contexts).
 */
/* CQ, EQ: armed; SRQ: limit armed. */
#define VHCA_CTX_F_ARMED     (1 << 0)
/* CQ: armed for solicited completions only. */
#define VHCA_CTX_F_SOLICITED (1 << 1)
/* CQ: overflowed (CQ-03); SRQ: in error. */
#define VHCA_CTX_F_ERROR     (1 << 2)
/* MR: the identity DMA MR (VHCA_REG_MR_F_DMA). */
#define VHCA_CTX_F_DMA       (1 << 3)
/* MR: a fast-registration MR (VHCA_REG_MR_F_FAST; MP-08). */
#define VHCA_CTX_F_FAST      (1 << 4)
/*
 * MR: a fast-registration MR that is free (not registered, or invalidated
 * since): its key grants nothing.
 */
#define VHCA_CTX_F_FREE      (1 << 5)
/*
 * MR: over device memory (VHCA_REG_MR_F_DM; issue 29 item 2): `first_page` is
 * the DM byte offset of `iova`.
 */
#define VHCA_CTX_F_DM        (1 << 7)

/* QP context (CTX_TABLE = VHCA_CTX_QPC). */
struct vhca_qp_context {
	__u32 qpn;
	__u32 pdn;
	__u32 send_cqn;
	__u32 recv_cqn;
	__u32 srqn;
	__u32 dest_qpn;
	__u32 qkey;
	/* `VHCA_ACCESS_*`. */
	__u32 access;
	/* Next PSN the requester sends. */
	__u32 sq_psn;
	/* Oldest PSN not yet acknowledged. */
	__u32 sq_una_psn;
	/* Expected PSN of the responder (ePSN). */
	__u32 rq_psn;
	/* SQ producer index last read from the doorbell slot. */
	__u32 sq_pi;
	/* Send WQEs fetched. */
	__u32 sq_ci;
	/* Send WQEs retired (completed or silently retired, OR-06). */
	__u32 sq_done;
	/* RQ producer index last read from the doorbell slot. */
	__u32 rq_pi;
	/* Receive WQEs consumed. */
	__u32 rq_ci;
	__u32 uar;
	__u16 db_slot;
	__u16 pkey_index;
	/* `enum vhca_qp_type`. */
	__u8 qp_type;
	/* `enum vhca_qp_state`. */
	__u8 state;
	/* `enum vhca_mtu`. */
	__u8 path_mtu;
	__u8 port;
	__u8 log2_sq_size;
	__u8 log2_rq_size;
	__u8 sq_wqe_shift;
	__u8 rq_wqe_shift;
	__u8 timeout;
	__u8 retry_cnt;
	__u8 rnr_retry;
	__u8 min_rnr_timer;
	__u8 max_rd_atomic;
	__u8 max_dest_rd_atomic;
	__u8 sq_sig_all;
	__u8 rsvd;
	/* The path (RC, UC). */
	struct vhca_av av;
	__u64 tx_packets;
	__u64 rx_packets;
	/* Packets sent again (timeouts and NAKs, RL-10, RL-03). */
	__u64 retransmits;
	/* RNR NAKs received (RL-11). */
	__u64 rnr_naks;
	struct vhca_pbl sq;
	struct vhca_pbl rq;
};
_Static_assert(sizeof(struct vhca_qp_context) == 192, "vhca_qp_context: size");
_Static_assert(offsetof(struct vhca_qp_context, qpn) == 0, "vhca_qp_context.qpn");
_Static_assert(offsetof(struct vhca_qp_context, pdn) == 4, "vhca_qp_context.pdn");
_Static_assert(offsetof(struct vhca_qp_context, send_cqn) == 8, "vhca_qp_context.send_cqn");
_Static_assert(offsetof(struct vhca_qp_context, recv_cqn) == 12, "vhca_qp_context.recv_cqn");
_Static_assert(offsetof(struct vhca_qp_context, srqn) == 16, "vhca_qp_context.srqn");
_Static_assert(offsetof(struct vhca_qp_context, dest_qpn) == 20, "vhca_qp_context.dest_qpn");
_Static_assert(offsetof(struct vhca_qp_context, qkey) == 24, "vhca_qp_context.qkey");
_Static_assert(offsetof(struct vhca_qp_context, access) == 28, "vhca_qp_context.access");
_Static_assert(offsetof(struct vhca_qp_context, sq_psn) == 32, "vhca_qp_context.sq_psn");
_Static_assert(offsetof(struct vhca_qp_context, sq_una_psn) == 36, "vhca_qp_context.sq_una_psn");
_Static_assert(offsetof(struct vhca_qp_context, rq_psn) == 40, "vhca_qp_context.rq_psn");
_Static_assert(offsetof(struct vhca_qp_context, sq_pi) == 44, "vhca_qp_context.sq_pi");
_Static_assert(offsetof(struct vhca_qp_context, sq_ci) == 48, "vhca_qp_context.sq_ci");
_Static_assert(offsetof(struct vhca_qp_context, sq_done) == 52, "vhca_qp_context.sq_done");
_Static_assert(offsetof(struct vhca_qp_context, rq_pi) == 56, "vhca_qp_context.rq_pi");
_Static_assert(offsetof(struct vhca_qp_context, rq_ci) == 60, "vhca_qp_context.rq_ci");
_Static_assert(offsetof(struct vhca_qp_context, uar) == 64, "vhca_qp_context.uar");
_Static_assert(offsetof(struct vhca_qp_context, db_slot) == 68, "vhca_qp_context.db_slot");
_Static_assert(offsetof(struct vhca_qp_context, pkey_index) == 70, "vhca_qp_context.pkey_index");
_Static_assert(offsetof(struct vhca_qp_context, qp_type) == 72, "vhca_qp_context.qp_type");
_Static_assert(offsetof(struct vhca_qp_context, state) == 73, "vhca_qp_context.state");
_Static_assert(offsetof(struct vhca_qp_context, path_mtu) == 74, "vhca_qp_context.path_mtu");
_Static_assert(offsetof(struct vhca_qp_context, port) == 75, "vhca_qp_context.port");
_Static_assert(offsetof(struct vhca_qp_context, log2_sq_size) == 76, "vhca_qp_context.log2_sq_size");
_Static_assert(offsetof(struct vhca_qp_context, log2_rq_size) == 77, "vhca_qp_context.log2_rq_size");
_Static_assert(offsetof(struct vhca_qp_context, sq_wqe_shift) == 78, "vhca_qp_context.sq_wqe_shift");
_Static_assert(offsetof(struct vhca_qp_context, rq_wqe_shift) == 79, "vhca_qp_context.rq_wqe_shift");
_Static_assert(offsetof(struct vhca_qp_context, timeout) == 80, "vhca_qp_context.timeout");
_Static_assert(offsetof(struct vhca_qp_context, retry_cnt) == 81, "vhca_qp_context.retry_cnt");
_Static_assert(offsetof(struct vhca_qp_context, rnr_retry) == 82, "vhca_qp_context.rnr_retry");
_Static_assert(offsetof(struct vhca_qp_context, min_rnr_timer) == 83, "vhca_qp_context.min_rnr_timer");
_Static_assert(offsetof(struct vhca_qp_context, max_rd_atomic) == 84, "vhca_qp_context.max_rd_atomic");
_Static_assert(offsetof(struct vhca_qp_context, max_dest_rd_atomic) == 85, "vhca_qp_context.max_dest_rd_atomic");
_Static_assert(offsetof(struct vhca_qp_context, sq_sig_all) == 86, "vhca_qp_context.sq_sig_all");
_Static_assert(offsetof(struct vhca_qp_context, rsvd) == 87, "vhca_qp_context.rsvd");
_Static_assert(offsetof(struct vhca_qp_context, av) == 88, "vhca_qp_context.av");
_Static_assert(offsetof(struct vhca_qp_context, tx_packets) == 128, "vhca_qp_context.tx_packets");
_Static_assert(offsetof(struct vhca_qp_context, rx_packets) == 136, "vhca_qp_context.rx_packets");
_Static_assert(offsetof(struct vhca_qp_context, retransmits) == 144, "vhca_qp_context.retransmits");
_Static_assert(offsetof(struct vhca_qp_context, rnr_naks) == 152, "vhca_qp_context.rnr_naks");
_Static_assert(offsetof(struct vhca_qp_context, sq) == 160, "vhca_qp_context.sq");
_Static_assert(offsetof(struct vhca_qp_context, rq) == 176, "vhca_qp_context.rq");

/* CQ context (CTX_TABLE = VHCA_CTX_CQC). */
struct vhca_cq_context {
	__u32 cqn;
	__u32 eqn;
	__u32 uar;
	__u16 db_slot;
	__u8 log2_entries;
	/* `VHCA_CTX_F_ARMED`, `SOLICITED`, `ERROR`. */
	__u8 flags;
	/* CQEs written (free-running producer index). */
	__u32 pi;
	/* Consumer index last read from the doorbell slot. */
	__u32 ci;
	/* Arm word last taken. */
	__u32 arm;
	/*
	 * Uses of the CQ by QPs, once per role (a QP with one CQ for both counts
	 * twice).
	 */
	__u32 users;
	/* Completion events raised. */
	__u64 events;
	__u64 rsvd;
	struct vhca_pbl ring;
};
_Static_assert(sizeof(struct vhca_cq_context) == 64, "vhca_cq_context: size");
_Static_assert(offsetof(struct vhca_cq_context, cqn) == 0, "vhca_cq_context.cqn");
_Static_assert(offsetof(struct vhca_cq_context, eqn) == 4, "vhca_cq_context.eqn");
_Static_assert(offsetof(struct vhca_cq_context, uar) == 8, "vhca_cq_context.uar");
_Static_assert(offsetof(struct vhca_cq_context, db_slot) == 12, "vhca_cq_context.db_slot");
_Static_assert(offsetof(struct vhca_cq_context, log2_entries) == 14, "vhca_cq_context.log2_entries");
_Static_assert(offsetof(struct vhca_cq_context, flags) == 15, "vhca_cq_context.flags");
_Static_assert(offsetof(struct vhca_cq_context, pi) == 16, "vhca_cq_context.pi");
_Static_assert(offsetof(struct vhca_cq_context, ci) == 20, "vhca_cq_context.ci");
_Static_assert(offsetof(struct vhca_cq_context, arm) == 24, "vhca_cq_context.arm");
_Static_assert(offsetof(struct vhca_cq_context, users) == 28, "vhca_cq_context.users");
_Static_assert(offsetof(struct vhca_cq_context, events) == 32, "vhca_cq_context.events");
_Static_assert(offsetof(struct vhca_cq_context, rsvd) == 40, "vhca_cq_context.rsvd");
_Static_assert(offsetof(struct vhca_cq_context, ring) == 48, "vhca_cq_context.ring");

/* SRQ context (CTX_TABLE = VHCA_CTX_SRQC). */
struct vhca_srq_context {
	__u32 srqn;
	__u32 pdn;
	__u32 max_wr;
	__u32 max_sge;
	/* Armed limit (0 if not armed). */
	__u32 srq_limit;
	/* Producer index last read from the doorbell slot. */
	__u32 pi;
	/* WQEs consumed. */
	__u32 ci;
	__u32 uar;
	__u16 db_slot;
	__u8 log2_entries;
	__u8 wqe_shift;
	/* QPs using the SRQ. */
	__u32 users;
	/* `VHCA_CTX_F_ARMED`, `ERROR`. */
	__u8 flags;
	__u8 rsvd[7];
	struct vhca_pbl ring;
};
_Static_assert(sizeof(struct vhca_srq_context) == 64, "vhca_srq_context: size");
_Static_assert(offsetof(struct vhca_srq_context, srqn) == 0, "vhca_srq_context.srqn");
_Static_assert(offsetof(struct vhca_srq_context, pdn) == 4, "vhca_srq_context.pdn");
_Static_assert(offsetof(struct vhca_srq_context, max_wr) == 8, "vhca_srq_context.max_wr");
_Static_assert(offsetof(struct vhca_srq_context, max_sge) == 12, "vhca_srq_context.max_sge");
_Static_assert(offsetof(struct vhca_srq_context, srq_limit) == 16, "vhca_srq_context.srq_limit");
_Static_assert(offsetof(struct vhca_srq_context, pi) == 20, "vhca_srq_context.pi");
_Static_assert(offsetof(struct vhca_srq_context, ci) == 24, "vhca_srq_context.ci");
_Static_assert(offsetof(struct vhca_srq_context, uar) == 28, "vhca_srq_context.uar");
_Static_assert(offsetof(struct vhca_srq_context, db_slot) == 32, "vhca_srq_context.db_slot");
_Static_assert(offsetof(struct vhca_srq_context, log2_entries) == 34, "vhca_srq_context.log2_entries");
_Static_assert(offsetof(struct vhca_srq_context, wqe_shift) == 35, "vhca_srq_context.wqe_shift");
_Static_assert(offsetof(struct vhca_srq_context, users) == 36, "vhca_srq_context.users");
_Static_assert(offsetof(struct vhca_srq_context, flags) == 40, "vhca_srq_context.flags");
_Static_assert(offsetof(struct vhca_srq_context, rsvd) == 41, "vhca_srq_context.rsvd");
_Static_assert(offsetof(struct vhca_srq_context, ring) == 48, "vhca_srq_context.ring");

/*
 * Memory protection table entry (CTX_TABLE = VHCA_CTX_MPT), by key index.
 */
struct vhca_mr_context {
	/* Current key: (index << 8) | key byte (MP-02). */
	__u32 key;
	__u32 pdn;
	/* `VHCA_ACCESS_*`. */
	__u32 access;
	/* Pages in the translation (the MTT, device-resident). */
	__u32 npages;
	__u64 iova;
	__u64 length;
	/*
	 * Guest-physical address of the first page; with `VHCA_CTX_F_DM`, the DM
	 * byte offset of `iova`.
	 */
	__u64 first_page;
	__u8 page_shift;
	/*
	 * `VHCA_CTX_F_DMA`, `VHCA_CTX_F_FAST`, `VHCA_CTX_F_FREE`, `VHCA_CTX_F_DM`.
	 */
	__u8 flags;
	__u8 rsvd[6];
};
_Static_assert(sizeof(struct vhca_mr_context) == 48, "vhca_mr_context: size");
_Static_assert(offsetof(struct vhca_mr_context, key) == 0, "vhca_mr_context.key");
_Static_assert(offsetof(struct vhca_mr_context, pdn) == 4, "vhca_mr_context.pdn");
_Static_assert(offsetof(struct vhca_mr_context, access) == 8, "vhca_mr_context.access");
_Static_assert(offsetof(struct vhca_mr_context, npages) == 12, "vhca_mr_context.npages");
_Static_assert(offsetof(struct vhca_mr_context, iova) == 16, "vhca_mr_context.iova");
_Static_assert(offsetof(struct vhca_mr_context, length) == 24, "vhca_mr_context.length");
_Static_assert(offsetof(struct vhca_mr_context, first_page) == 32, "vhca_mr_context.first_page");
_Static_assert(offsetof(struct vhca_mr_context, page_shift) == 40, "vhca_mr_context.page_shift");
_Static_assert(offsetof(struct vhca_mr_context, flags) == 41, "vhca_mr_context.flags");
_Static_assert(offsetof(struct vhca_mr_context, rsvd) == 42, "vhca_mr_context.rsvd");

/* EQ context (CTX_TABLE = VHCA_CTX_EQC); EQ 0 is the async EQ. */
struct vhca_eq_context {
	__u32 eqn;
	__u32 uar;
	__u16 db_slot;
	/* MSI-X vector. */
	__u16 vector;
	__u8 log2_entries;
	/* `VHCA_CTX_F_ARMED`. */
	__u8 flags;
	__u16 rsvd0;
	/* EQEs written (free-running producer index). */
	__u32 pi;
	/* Consumer index last read from the doorbell slot. */
	__u32 ci;
	/* Arm word last taken. */
	__u32 arm;
	__u32 rsvd1;
	/* Interrupts signalled. */
	__u64 interrupts;
	__u64 rsvd2;
	/* The ring (EQ 0: contiguous). */
	struct vhca_pbl ring;
};
_Static_assert(sizeof(struct vhca_eq_context) == 64, "vhca_eq_context: size");
_Static_assert(offsetof(struct vhca_eq_context, eqn) == 0, "vhca_eq_context.eqn");
_Static_assert(offsetof(struct vhca_eq_context, uar) == 4, "vhca_eq_context.uar");
_Static_assert(offsetof(struct vhca_eq_context, db_slot) == 8, "vhca_eq_context.db_slot");
_Static_assert(offsetof(struct vhca_eq_context, vector) == 10, "vhca_eq_context.vector");
_Static_assert(offsetof(struct vhca_eq_context, log2_entries) == 12, "vhca_eq_context.log2_entries");
_Static_assert(offsetof(struct vhca_eq_context, flags) == 13, "vhca_eq_context.flags");
_Static_assert(offsetof(struct vhca_eq_context, rsvd0) == 14, "vhca_eq_context.rsvd0");
_Static_assert(offsetof(struct vhca_eq_context, pi) == 16, "vhca_eq_context.pi");
_Static_assert(offsetof(struct vhca_eq_context, ci) == 20, "vhca_eq_context.ci");
_Static_assert(offsetof(struct vhca_eq_context, arm) == 24, "vhca_eq_context.arm");
_Static_assert(offsetof(struct vhca_eq_context, rsvd1) == 28, "vhca_eq_context.rsvd1");
_Static_assert(offsetof(struct vhca_eq_context, interrupts) == 32, "vhca_eq_context.interrupts");
_Static_assert(offsetof(struct vhca_eq_context, rsvd2) == 40, "vhca_eq_context.rsvd2");
_Static_assert(offsetof(struct vhca_eq_context, ring) == 48, "vhca_eq_context.ring");

/* =============================== Counters =============================== */

/* QUERY_COUNTERS sets (names in `VHCA_COUNTERS_<SET>_NAMES`). */
enum vhca_counter_set {
	/* Packets, bytes, ACKs, NAKs, retransmissions, timeouts of the port. */
	VHCA_COUNTERS_PORT = 0,
	/* Packets dropped by the wire checks, per reason (WF-09, PV-10). */
	VHCA_COUNTERS_WIRE_DROP = 1,
	/* Packets dropped by the transport, per reason (PV-10). */
	VHCA_COUNTERS_RX_DROP = 2,
	/* NAKs sent, per reason (RL-12). */
	VHCA_COUNTERS_NAK_SENT = 3,
	/*
	 * The device's data path: WQEs fetched and refused, doorbell overruns,
	 * guest-memory faults, CQEs, EQEs, overflows, interrupts, CQEs discarded on
	 * a CQ in error, the memory budget and the fabric key's drops (issue 13).
	 */
	VHCA_COUNTERS_DEVICE = 4,
};

/* Counter names of a set, in QUERY_COUNTERS order. */
#define VHCA_COUNTERS_PORT_NAMES \
	"rx_packets", \
	"tx_packets", \
	"rx_bytes", \
	"tx_bytes", \
	"acks_sent", \
	"naks_sent", \
	"rnr_naks_sent", \
	"retransmits", \
	"timeouts", \
	"rnr_naks_received", \
	"duplicates_received", \
	"tx_no_route", \
	"loss_probes", \
	"seq_nak_go_backs", \
	"seq_naks_absorbed", \
	"probe_go_backs", \
	"spurious_probes", \
	"resent_packets", \
	"recovery_stall_us", \
	"mcast_rx_copies", \
	"mcast_own_skipped", \
	"credit_waits", \
	"credit_probes", \
	"credit_acks_sent", \
	"path_migrations", \
	"path_migration_errors", \
	"reorder_held", \
	"reorder_in_order", \
	"reorder_overtaken", \
	"reorder_expired", \
	"reorder_full", \
	"dup_reads_queued", \
	"reorder_skipped", \
	"odp_faults_raised", \
	"odp_faults_not_raised", \
	"odp_faults_resolved", \
	"odp_faults_failed", \
	"odp_rnr_naks", \
	"odp_responses_dropped", \
	"odp_invalidations", \
	"cc_ce_seen", \
	"cc_cnps_sent", \
	"cc_cnps_received", \
	"cc_rate_cuts", \
	"cc_fecn_seen", \
	"cc_becns_received", \
	"cc_cn_queue_full"
#define VHCA_COUNTERS_PORT_COUNT 47

/* Counter names of a set, in QUERY_COUNTERS order. */
#define VHCA_COUNTERS_WIRE_DROP_NAMES \
	"truncated", \
	"length_mismatch", \
	"bad_lver", \
	"raw_packet", \
	"bad_ip_ver", \
	"bad_next_header", \
	"bad_tver", \
	"unknown_opcode", \
	"bad_pad_count", \
	"reserved_syndrome", \
	"bad_icrc", \
	"bad_vcrc", \
	"not_roce", \
	"bad_ip_checksum"
#define VHCA_COUNTERS_WIRE_DROP_COUNT 14

/* Counter names of a set, in QUERY_COUNTERS order. */
#define VHCA_COUNTERS_RX_DROP_NAMES \
	"unknown_qp", \
	"qp_not_receiving", \
	"service_mismatch", \
	"bad_pkey", \
	"bad_qkey", \
	"bad_dlid", \
	"bad_slid", \
	"multicast", \
	"out_of_sequence", \
	"unmatched_duplicate", \
	"uc_resync", \
	"no_receive_wqe", \
	"ud_bad_length", \
	"ghost_response", \
	"unexpected_response", \
	"not_expected", \
	"bad_dmac", \
	"bad_gid", \
	"response_queue_full", \
	"spoofed_slid", \
	"mcast_no_grh", \
	"mcast_bad_dgid", \
	"grh_mismatch", \
	"bad_grh_gid", \
	"vl15_not_qp0", \
	"qp0_not_vl15", \
	"unsupported_vl", \
	"read_response_after_gap"
#define VHCA_COUNTERS_RX_DROP_COUNT 28

/* Counter names of a set, in QUERY_COUNTERS order. */
#define VHCA_COUNTERS_NAK_SENT_NAMES \
	"psn_sequence", \
	"op_sequence", \
	"bad_opcode", \
	"op_not_enabled", \
	"pmtu_length", \
	"dma_length", \
	"too_long", \
	"receive_too_small", \
	"receive_protection", \
	"no_resources", \
	"no_such_key", \
	"key_mismatch", \
	"pd_mismatch", \
	"out_of_bounds", \
	"no_remote_read", \
	"no_remote_write", \
	"no_remote_atomic", \
	"misaligned_atomic", \
	"memory_fault", \
	"window_not_bound", \
	"window_wrong_qp", \
	"invalid_invalidate", \
	"no_flush", \
	"region_invalidated", \
	"xrc_srq", \
	"odp_failed"
#define VHCA_COUNTERS_NAK_SENT_COUNT 26

/* Counter names of a set, in QUERY_COUNTERS order. */
#define VHCA_COUNTERS_DEVICE_NAMES \
	"send_wqes", \
	"recv_wqes", \
	"bad_wqes", \
	"doorbell_overruns", \
	"memory_faults", \
	"cqes", \
	"cq_overflows", \
	"eqes", \
	"eq_overflows", \
	"interrupts", \
	"cqes_discarded", \
	"mem_budget_stalls", \
	"mem_budget_refusals", \
	"mem_held_bytes", \
	"fabric_key_rx_verified", \
	"fabric_key_rx_untagged", \
	"fabric_key_rx_short", \
	"fabric_key_rx_bad_tag", \
	"fabric_key_rx_wrong_sender", \
	"fabric_key_rx_replay", \
	"fabric_key_tx_dropped"
#define VHCA_COUNTERS_DEVICE_COUNT 21

#endif /* VHCA_ABI_H */
