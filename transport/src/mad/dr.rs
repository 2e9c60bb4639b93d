//! Directed-route SMP processing (IBA 14.2.2.2 outgoing, 14.2.2.3-4 returning;
//! compliance statements C14-6, C14-9, C14-13), as pure functions over the SMP's
//! [`DrFields`] and the port it arrived on or leaves by.
//!
//! Hops are counted from the SM's node: on the way out (D = 0) a node reached after
//! `i` hops receives the SMP with `hop_ptr == i`, notes the port it arrived on in
//! `return_path[i]`, and sends it on by `initial_path[i + 1]` with `hop_ptr = i + 1`.
//! The node at `hop_ptr == hop_cnt` is the end of the directed part: it takes the SMP
//! (permissive DrDLID) with `hop_ptr = hop_cnt + 1`. On the way back (D = 1) each hop
//! decrements the pointer and leaves by `return_path[hop_ptr]`; `hop_ptr == 0` means
//! the SM has it. Linux's `drivers/infiniband/core/smi.c` splits the same checks into
//! a receive and a send half; here an HCA endpoint and a switch hop are each one call.
//!
//! A directed part may have LID-routed parts around it (DrSLID / DrDLID not
//! permissive, IBA 14.2.1.2): the node that ends the head starts the directed part
//! (C14-9:1 there), the node that ends the directed part LID-routes on to DrDLID,
//! and the response retraces both (C14-13:1 where its LID-routed part ends,
//! C14-13:3 LID-routing to DrSLID). OpenSM and the diags use permissive LIDs only;
//! ibsim rejects the rest.
//!
//! A bad hop pointer or count is a [`DrDrop`], for the caller to count: never a panic
//! (every index is bounded by `hop_cnt < 64` first).

use super::header::DrFields;

/// The permissive LID: "this node", as DrSLID/DrDLID "no LID-routed part" (IBA 14.2.1.2).
pub const PERMISSIVE_LID: u16 = 0xffff;
/// Valid hop counts are 0..=63 (C14-6): the paths are 64 bytes with index 0 unused.
pub const MAX_HOP_CNT: u8 = 63;

impl DrFields {
    /// The fields of a directed-route SMP an SM sends out of its own port
    /// along `hops` (the port to leave by at hops 1..=n, IBA 14.2.2), with no
    /// LID-routed part before or after (DrSLID = DrDLID = permissive), the
    /// return path still empty. None past [`MAX_HOP_CNT`] hops (C14-6).
    pub fn outgoing(hops: &[u8]) -> Option<DrFields> {
        let hop_cnt = u8::try_from(hops.len())
            .ok()
            .filter(|&n| n <= MAX_HOP_CNT)?;
        let mut initial_path = [0u8; 64];
        initial_path[1..=hops.len()].copy_from_slice(hops);
        Some(DrFields {
            direction: false,
            hop_ptr: 0,
            hop_cnt,
            dr_slid: PERMISSIVE_LID,
            dr_dlid: PERMISSIVE_LID,
            initial_path,
            return_path: [0u8; 64],
        })
    }
}

/// Why a directed-route SMP was dropped (the caller counts each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum DrDrop {
    /// Hop count above 63 (C14-6).
    #[error("DR SMP hop count above 63")]
    HopCountTooLarge,
    /// The hop pointer is not one this node may see in this direction (C14-9:5,
    /// C14-13:5, or a hop only a switch may be at).
    #[error("DR SMP hop pointer out of place")]
    BadHopPointer,
    /// The path names a port other than the one the SMP arrived on or leaves by.
    #[error("DR SMP path names another port")]
    WrongPort,
    /// The path names a port this switch does not have.
    #[error("DR SMP path names a port that does not exist")]
    NoSuchPort,
    /// The directed part ends here but DrDLID/DrSLID asks for a LID-routed part,
    /// which only a switch can start (C14-9:3, C14-13:3).
    #[error("DR SMP LID-routed part cannot start at an endpoint")]
    NotPermissive,
}

/// Where an SMP that arrived at an HCA port goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HcaDeliver {
    /// An outgoing SMP at its destination: to this node's SMA (C14-9:3 and 4).
    Sma,
    /// A returning SMP at its origin: to this node's SM on QP0 (C14-13:3 and 4).
    Sm,
}

/// Where a directed-route SMP goes next from a switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SwitchHop {
    /// Out by this physical port, still directed.
    Forward(u8),
    /// To the switch's own management port 0 (its SMA, or its SM on the way back).
    Local,
    /// The directed part ends here; LID-route to this LID (DrDLID out, DrSLID back).
    LidRoute(u16),
}

impl DrDrop {
    /// Every reason, in counter order.
    pub const ALL: [DrDrop; 5] = [
        DrDrop::HopCountTooLarge,
        DrDrop::BadHopPointer,
        DrDrop::WrongPort,
        DrDrop::NoSuchPort,
        DrDrop::NotPermissive,
    ];

    /// This reason's index in [`DrDrop::ALL`].
    pub fn index(self) -> usize {
        DrDrop::ALL.iter().position(|d| *d == self).unwrap_or(0)
    }
}

fn check_count(dr: &DrFields) -> Result<(), DrDrop> {
    if dr.hop_cnt > MAX_HOP_CNT {
        Err(DrDrop::HopCountTooLarge)
    } else {
        Ok(())
    }
}

/// An SMP arrived at an HCA's port `in_port` (an HCA is never an intermediate hop).
///
/// Outgoing: it must be at the end of the directed part, either by the directed part
/// itself (`hop_ptr == hop_cnt`, DrDLID permissive: the return path records
/// `in_port` and the pointer moves to `hop_cnt + 1`, C14-9:3) or after a LID-routed
/// tail (`hop_ptr == hop_cnt + 1`, C14-9:4). Returning: `hop_ptr == 1` with a
/// permissive DrSLID reaches the SM here (pointer to 0, C14-13:3), `hop_ptr == 0`
/// came LID-routed (C14-13:4).
pub fn hca_receive(dr: &mut DrFields, in_port: u8) -> Result<HcaDeliver, DrDrop> {
    check_count(dr)?;
    let (ptr, cnt) = (dr.hop_ptr, dr.hop_cnt);
    if !dr.direction {
        if ptr == cnt {
            if dr.dr_dlid != PERMISSIVE_LID {
                return Err(DrDrop::NotPermissive);
            }
            if cnt > 0 {
                dr.return_path[usize::from(cnt)] = in_port;
            }
            dr.hop_ptr = cnt + 1;
            Ok(HcaDeliver::Sma)
        } else if ptr == cnt + 1 {
            Ok(HcaDeliver::Sma)
        } else {
            Err(DrDrop::BadHopPointer)
        }
    } else if ptr == 1 {
        if dr.dr_slid != PERMISSIVE_LID {
            return Err(DrDrop::NotPermissive);
        }
        dr.hop_ptr = 0;
        Ok(HcaDeliver::Sm)
    } else if ptr == 0 {
        Ok(HcaDeliver::Sm)
    } else {
        Err(DrDrop::BadHopPointer)
    }
}

/// Where an SMP an HCA sends goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HcaSend {
    /// Out of the port the caller named.
    Port,
    /// Back to this node itself (hop count 0): the SMA for an outgoing SMP, the SM
    /// for a response.
    Local,
    /// LID-routed: a request whose directed part starts at another node (DrSLID
    /// not permissive: LID-route it there, pointer still 0), or a response to a
    /// request that reached this node through a LID-routed tail (back to the
    /// request's LRH:SLID, the node that ended the directed part; pointer still
    /// `hop_cnt + 1` for that node's C14-13:1).
    LidRouted,
}

/// The SMA turns the request it took into its response: sets D and moves the pointer
/// for the first hop back (C14-13:1): out by `return_path[hop_cnt]`, which must be
/// `out_port`. With hop count 0 the response stays on this node for its SM (C14-13:3).
pub fn hca_respond(dr: &mut DrFields, out_port: u8) -> Result<HcaSend, DrDrop> {
    dr.direction = true;
    hca_send(dr, out_port)
}

/// An HCA sends a directed-route SMP by `out_port`: the SM on this node starting a
/// request (D = 0, `hop_ptr == 0`, C14-9:1) or the SMA answering (D = 1,
/// `hop_ptr == hop_cnt + 1`, C14-13:1).
pub fn hca_send(dr: &mut DrFields, out_port: u8) -> Result<HcaSend, DrDrop> {
    check_count(dr)?;
    let (ptr, cnt) = (dr.hop_ptr, dr.hop_cnt);
    if !dr.direction {
        if ptr != 0 {
            return Err(DrDrop::BadHopPointer);
        }
        if dr.dr_slid != PERMISSIVE_LID && cnt > 0 {
            // A LID-routed head: the node at its end takes C14-9:1 (see switch_hop).
            return Ok(HcaSend::LidRouted);
        }
        dr.hop_ptr = 1;
        if cnt == 0 {
            // C14-9:3 at the origin: the directed part is empty.
            if dr.dr_dlid != PERMISSIVE_LID {
                return Err(DrDrop::NotPermissive);
            }
            return Ok(HcaSend::Local);
        }
        if dr.initial_path[1] != out_port {
            return Err(DrDrop::WrongPort);
        }
        Ok(HcaSend::Port)
    } else if cnt > 0 && ptr == cnt + 1 && dr.dr_dlid != PERMISSIVE_LID {
        // The request came through a LID-routed tail (C14-9:4): answer LID-routed.
        Ok(HcaSend::LidRouted)
    } else if cnt > 0 && ptr == cnt + 1 {
        dr.hop_ptr = cnt;
        if dr.return_path[usize::from(cnt)] != out_port {
            return Err(DrDrop::WrongPort);
        }
        Ok(HcaSend::Port)
    } else if cnt == 0 && ptr == 1 {
        if dr.dr_slid != PERMISSIVE_LID {
            return Err(DrDrop::NotPermissive);
        }
        dr.hop_ptr = 0;
        Ok(HcaSend::Local)
    } else {
        Err(DrDrop::BadHopPointer)
    }
}

/// A directed-route SMP arrived at a switch on physical port `in_port` (1..=`num_ports`):
/// where it goes next, with the pointer and (outgoing) the return path updated.
///
/// Outgoing: an intermediate hop (`1 <= hop_ptr < hop_cnt`, C14-9:2) records
/// `in_port` and forwards by `initial_path[hop_ptr + 1]`; the end of the directed
/// part (`hop_ptr == hop_cnt`, C14-9:3) records `in_port` and takes it locally or
/// LID-routes it to DrDLID. Returning: an intermediate hop (`2 <= hop_ptr <=
/// hop_cnt`, C14-13:2) forwards by `return_path[hop_ptr - 1]`; `hop_ptr == 1`
/// (C14-13:3) has reached the SM's node (permissive DrSLID) or LID-routes to DrSLID.
pub fn switch_hop(dr: &mut DrFields, in_port: u8, num_ports: u8) -> Result<SwitchHop, DrDrop> {
    check_count(dr)?;
    let (ptr, cnt) = (dr.hop_ptr, dr.hop_cnt);
    let valid = |p: u8| (1..=num_ports).contains(&p);
    if !valid(in_port) {
        return Err(DrDrop::NoSuchPort);
    }
    if !dr.direction {
        if ptr >= 1 && ptr < cnt {
            let out = dr.initial_path[usize::from(ptr) + 1];
            if !valid(out) {
                return Err(DrDrop::NoSuchPort);
            }
            dr.return_path[usize::from(ptr)] = in_port;
            dr.hop_ptr = ptr + 1;
            Ok(SwitchHop::Forward(out))
        } else if ptr == cnt && cnt > 0 {
            dr.return_path[usize::from(ptr)] = in_port;
            dr.hop_ptr = cnt + 1;
            Ok(if dr.dr_dlid == PERMISSIVE_LID {
                SwitchHop::Local
            } else {
                SwitchHop::LidRoute(dr.dr_dlid)
            })
        } else if ptr == 0 && cnt > 0 && dr.dr_slid != PERMISSIVE_LID {
            // The LID-routed head ends here: this switch starts the directed part
            // (C14-9:1 as the first node of the directed part).
            let out = dr.initial_path[1];
            if !valid(out) {
                return Err(DrDrop::NoSuchPort);
            }
            dr.hop_ptr = 1;
            Ok(SwitchHop::Forward(out))
        } else {
            // hop_ptr 0 with a directed part: the sender did not advance it (C14-9:1);
            // past hop_cnt: the SMP is in its LID-routed tail and is not ours to
            // direct (C14-9:5 for anything larger).
            Err(DrDrop::BadHopPointer)
        }
    } else if ptr >= 2 && ptr <= cnt {
        let out = dr.return_path[usize::from(ptr) - 1];
        if !valid(out) {
            return Err(DrDrop::NoSuchPort);
        }
        dr.hop_ptr = ptr - 1;
        Ok(SwitchHop::Forward(out))
    } else if ptr == 1 {
        dr.hop_ptr = 0;
        Ok(if dr.dr_slid == PERMISSIVE_LID {
            SwitchHop::Local
        } else {
            SwitchHop::LidRoute(dr.dr_slid)
        })
    } else if cnt > 0 && ptr == cnt + 1 && dr.dr_dlid != PERMISSIVE_LID {
        // The response's LID-routed part ends at the node that ended the directed
        // part: the way back starts here (C14-13:1).
        let out = dr.return_path[usize::from(cnt)];
        if !valid(out) {
            return Err(DrDrop::NoSuchPort);
        }
        dr.hop_ptr = cnt;
        Ok(SwitchHop::Forward(out))
    } else {
        Err(DrDrop::BadHopPointer)
    }
}

/// A switch's SMA answers an SMP it took at the end of the directed part: the
/// response leaves by the port the request arrived on, `return_path[hop_cnt]`
/// (C14-13:1), or stays local with hop count 0.
pub fn switch_respond(dr: &mut DrFields, num_ports: u8) -> Result<SwitchHop, DrDrop> {
    check_count(dr)?;
    dr.direction = true;
    let (ptr, cnt) = (dr.hop_ptr, dr.hop_cnt);
    if ptr != cnt + 1 {
        return Err(DrDrop::BadHopPointer);
    }
    if cnt == 0 {
        dr.hop_ptr = 0;
        return Ok(SwitchHop::Local);
    }
    dr.hop_ptr = cnt;
    let out = dr.return_path[usize::from(cnt)];
    if !(1..=num_ports).contains(&out) {
        return Err(DrDrop::NoSuchPort);
    }
    Ok(SwitchHop::Forward(out))
}
