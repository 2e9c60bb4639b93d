//! Automatic path migration (AD-10; IBA 17.2.8, BTH:MigReq 9.2.4).
//!
//! A connected QP (RC, UC, XRC) may hold an alternate path beside its primary
//! one (`ALT_PATH`: address vector, P_Key index, port, Local ACK Timeout; seed
//! 001 "Alternate Path Address Information"). Its path migration state
//! (`PATH_MIG_STATE`) is one of Migrated, Rearm, Armed:
//!
//! * Modify QP to Rearm (or Armed) with an alternate path loaded arms it: vhca
//!   moves Rearm to Armed at once (vhca policy: the alternate path needs no work
//!   of the CA before it can be used). Modify QP to Migrated while Armed migrates
//!   on the consumer's request (Linux's `IB_MIG_MIGRATED`), without an event.
//! * Migration swaps the two paths: the alternate becomes the path the QP sends
//!   on and checks against, the old primary is kept as the alternate, and the
//!   state goes to Migrated. A later Rearm (without a new `ALT_PATH`) arms the
//!   way back.
//! * While Armed, packets that arrive on the alternate path are accepted (the
//!   alternate LID of C9-54 item 4, the alternate GIDs of C9-47.1.1 DGID steps
//!   6-7 and SGID steps 5-6, the alternate P_Key index); one with MigReq = 1 makes
//!   the responder migrate too (17.2.8) and raise the path migrated event.
//! * A QP that migrated sends MigReq = 1 ("the connection has been migrated",
//!   9.2.4) until the consumer re-arms it; a QP that never migrated sends 0, as
//!   before APM.
//!
//! * A packet with MigReq = 1 that comes on the alternate path of a QP that is
//!   not Armed (Migrated: never armed, or migrated and not re-armed) asks for
//!   a migration the QP cannot make: the header checks drop it (C9-54, C9-57)
//!   and the QP raises the path migration error event
//!   (`IBV_EVENT_PATH_MIG_ERR`, AE-01), once until the QP is armed again or
//!   given a new alternate path (the peer resends that request at every ACK
//!   timeout; one event tells the consumer, the drop counter counts them).
//!
//! The trigger (17.2.8 leaves it to the CA): vhca policy, an Armed requester
//! whose ACK timer fires [`Limits::apm_timeouts`](super::Limits) times in a
//! row without progress on the primary path migrates, resends from the oldest
//! unacknowledged PSN on the new path (RL-10: nothing is lost, the responder's
//! PSN checks drop what it already has) with its retry count restarted, and
//! raises `IBV_EVENT_PATH_MIG`. A QP not Armed retries and fails as before.

use super::{Counters, Effects, PortConfig, Qp};
use crate::verbs::{AddressVector, AttrMask, Event, GlobalRoute, MigState, QpAttr, VerbError};
use crate::wire::PacketRepr;

/// Per-QP APM state beyond what [`QpAttr`] reports.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Apm {
    /// An alternate path was loaded (`ALT_PATH`) since the last Reset: what
    /// arming requires.
    pub alt_loaded: bool,
    /// The QP migrated and was not re-armed since: its packets carry MigReq = 1.
    pub migreq: bool,
    /// ACK timeouts in a row on an Armed QP before it migrates (0: never).
    pub after_timeouts: u8,
    /// The path migration error event was raised since the QP was last
    /// armed or given an alternate path (one event per refused migration).
    pub mig_err_raised: bool,
}

/// The checks of a Modify QP's APM attributes that the pure mask table
/// (`qp_state`) cannot make: the alternate address vector's ranges and
/// source GID index, its P_Key index and port, its timeout; arming needs an
/// alternate path, given now or before (IBA 17.2.8: only a loaded alternate
/// path can be armed; AD-10).
pub(super) fn check_modify(
    qp: &Qp,
    port: &PortConfig,
    attr: &QpAttr,
    mask: AttrMask,
) -> Result<(), VerbError> {
    if mask.contains(AttrMask::ALT_PATH) {
        let av = &attr.alt_av;
        let sgids = if port.is_ethernet() {
            port.roce_gids.len()
        } else {
            1
        };
        let grh_ok = match av.grh {
            Some(g) => usize::from(g.sgid_index) < sgids && g.flow_label <= 0xF_FFFF,
            None => !port.is_ethernet(),
        };
        if av.sl > 15
            || av.src_path_bits > 0x7F
            || !grh_ok
            || attr.alt_timeout > 31
            || attr.alt_port_num != 1
            || usize::from(attr.alt_pkey_index) >= port.pkeys.len()
        {
            return Err(VerbError::InvalidAttr);
        }
    }
    if mask.contains(AttrMask::PATH_MIG_STATE)
        && matches!(attr.path_mig_state, MigState::Rearm | MigState::Armed)
        && !(qp.apm.alt_loaded || mask.contains(AttrMask::ALT_PATH))
    {
        return Err(VerbError::InvalidAttr);
    }
    Ok(())
}

/// Applies a checked Modify QP's APM attributes.
pub(super) fn apply_modify(
    qp: &mut Qp,
    attr: &QpAttr,
    mask: AttrMask,
    fx: &mut Effects,
    c: &mut Counters,
) {
    if mask.contains(AttrMask::ALT_PATH) {
        qp.attr.alt_av = attr.alt_av;
        qp.attr.alt_pkey_index = attr.alt_pkey_index;
        qp.attr.alt_port_num = attr.alt_port_num;
        qp.attr.alt_timeout = attr.alt_timeout;
        qp.apm.alt_loaded = true;
        qp.apm.mig_err_raised = false;
    }
    if mask.contains(AttrMask::PATH_MIG_STATE) {
        match attr.path_mig_state {
            MigState::Rearm | MigState::Armed => {
                qp.attr.path_mig_state = MigState::Armed;
                qp.apm.migreq = false;
                qp.apm.mig_err_raised = false;
            }
            MigState::Migrated if qp.attr.path_mig_state == MigState::Armed => {
                migrate(qp, fx, c, false);
            }
            MigState::Migrated => {}
        }
    }
}

/// Migrates `qp` to its alternate path (17.2.8): the paths swap, the state
/// goes to Migrated, the QP's packets carry MigReq = 1 from now on; with
/// `event`, the path migrated event (`IBV_EVENT_PATH_MIG`) is raised.
pub(super) fn migrate(qp: &mut Qp, fx: &mut Effects, c: &mut Counters, event: bool) {
    let a = &mut qp.attr;
    core::mem::swap(&mut a.av, &mut a.alt_av);
    core::mem::swap(&mut a.pkey_index, &mut a.alt_pkey_index);
    core::mem::swap(&mut a.port_num, &mut a.alt_port_num);
    core::mem::swap(&mut a.timeout, &mut a.alt_timeout);
    a.path_mig_state = MigState::Migrated;
    qp.apm.migreq = true;
    c.path_migrations += 1;
    log::info!("QP {} migrated to its alternate path (AD-10)", qp.qpn);
    if event {
        fx.events.push(Event::PathMigrated { qpn: qp.qpn });
    }
}

/// The requester's ACK timer fired without progress (RL-10): an Armed QP
/// migrates at its `after_timeouts`-th such timeout in a row, or at the one
/// that would otherwise exhaust its retry count, and its retry count restarts
/// (vhca policy, module docs). Returns whether it migrated.
pub(super) fn on_ack_timeout(qp: &mut Qp, fx: &mut Effects, c: &mut Counters) -> bool {
    if qp.attr.path_mig_state != MigState::Armed || qp.apm.after_timeouts == 0 {
        return false;
    }
    let in_a_row = qp.attr.retry_cnt.saturating_sub(qp.req.retry_left) + 1;
    let limit = qp
        .apm
        .after_timeouts
        .min(qp.attr.retry_cnt.saturating_add(1));
    if in_a_row < limit {
        return false;
    }
    migrate(qp, fx, c, true);
    qp.req.retry_left = qp.attr.retry_cnt;
    true
}

/// A received packet passed the header checks: one with MigReq = 1 on the
/// alternate path of an Armed QP makes it migrate (17.2.8), so that its
/// responses and requests follow the peer onto the new path.
/// `ethernet`: the packet came on a RoCE port, where only GIDs name paths.
pub(super) fn on_receive(
    qp: &mut Qp,
    pkt: &PacketRepr<'_>,
    ethernet: bool,
    fx: &mut Effects,
    c: &mut Counters,
) {
    if qp.attr.path_mig_state == MigState::Armed
        && pkt.transport.bth.mig_req
        && on_alternate(qp, pkt, ethernet)
    {
        migrate(qp, fx, c, true);
    }
}

/// A received packet failed the header checks: if it is a migration request
/// (MigReq = 1) on the alternate path of a connected QP that is not Armed, the
/// migration the peer asked for failed here, and the QP raises the path
/// migration error event (AD-10, AE-01), once per arming (module docs). The
/// packet stays dropped (C9-57). Returns whether an event was raised.
pub(super) fn on_rejected(
    qp: &mut Qp,
    pkt: &PacketRepr<'_>,
    ethernet: bool,
    port: &PortConfig,
    fx: &mut Effects,
    c: &mut Counters,
) -> bool {
    let alt_pkey_ok = || {
        port.pkeys
            .get(usize::from(qp.attr.alt_pkey_index))
            .is_some_and(|&own| super::io::pkey_match(pkt.transport.bth.pkey, own))
    };
    if qp.attr.path_mig_state == MigState::Armed
        || !qp.apm.alt_loaded
        || qp.apm.mig_err_raised
        || !pkt.transport.bth.mig_req
        || !crate::qp_state::receives_packets(qp.state)
        || !on_alternate(qp, pkt, ethernet)
        || !alt_pkey_ok()
    {
        return false;
    }
    qp.apm.mig_err_raised = true;
    c.path_migration_errors += 1;
    log::warn!(
        "QP {}: MigReq on the alternate path while not Armed: path migration error (AD-10)",
        qp.qpn
    );
    fx.events.push(Event::PathMigrationError { qpn: qp.qpn });
    true
}

/// Whether an Armed QP's alternate path may carry packets to it now.
pub(super) fn alt_active(qp: &Qp) -> bool {
    qp.attr.path_mig_state == MigState::Armed && qp.apm.alt_loaded
}

/// The paths a received packet may have come on: the primary one, and the
/// alternate while Armed (C9-54 item 4, C9-47.1.1).
pub(super) fn rx_paths(qp: &Qp) -> impl Iterator<Item = &AddressVector> {
    core::iter::once(&qp.attr.av).chain(alt_active(qp).then_some(&qp.attr.alt_av))
}

/// Whether the packet came on the alternate path: from its remote LID (on
/// InfiniBand) and, when the alternate path is global, from its remote GID.
fn on_alternate(qp: &Qp, pkt: &PacketRepr<'_>, ethernet: bool) -> bool {
    let alt = &qp.attr.alt_av;
    let gid_ok = |g: &GlobalRoute| pkt.grh.as_ref().is_some_and(|h| h.sgid == g.dgid);
    match alt.grh.as_ref() {
        Some(g) if !gid_ok(g) => false,
        Some(_) if ethernet => true,
        _ => pkt.lrh.slid == alt.dlid,
    }
}
