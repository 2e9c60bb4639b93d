//! Who the client is and how it maps the memory it hands over (issue 17,
//! ARCHITECTURE.md §5): guest RAM reaches the device as the file behind a
//! DMA map, and the device sees the guest's stores only if the client maps
//! that file shared. QEMU maps a memory backend without `share=on` private:
//! the guest's writes then land in copy-on-write pages the device never sees,
//! and the device would read stale memory without any error. The client's
//! `/proc/PID/maps` tells: a DMA map of a file the client maps, but only
//! privately, is refused with an error that names `share=on`.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::fs::MetadataExt;

/// The pid of the process at the other end of a UNIX stream socket
/// (SO_PEERCRED), if the kernel says.
pub(crate) fn peer_pid(socket: BorrowedFd<'_>) -> Option<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `socket` is an open descriptor for the call's duration;
    // `cred` and `len` are valid for writes of the size passed, and the
    // kernel writes at most `len` bytes.
    let r = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (r == 0 && cred.pid > 0).then_some(cred.pid as u32)
}

/// How a process maps a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mapping {
    /// Not at all (or we may not look): nothing to say.
    Unknown,
    /// At least one shared mapping: the device sees its stores.
    Shared,
    /// Only private (copy-on-write) mappings.
    PrivateOnly,
}

/// How the mappings in `maps` (the text of `/proc/PID/maps`) map the file
/// with device `dev` (major, minor) and inode `ino`.
pub(crate) fn mapping_in(maps: &str, dev: (u32, u32), ino: u64) -> Mapping {
    let mut private = false;
    for line in maps.lines() {
        // address perms offset dev inode [path]
        let mut f = line.split_whitespace();
        let (Some(_), Some(perms), Some(_), Some(d), Some(i)) =
            (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        if i.parse::<u64>().ok() != Some(ino) {
            continue;
        }
        let Some((maj, min)) = d.split_once(':') else {
            continue;
        };
        let parsed = (
            u32::from_str_radix(maj, 16).ok(),
            u32::from_str_radix(min, 16).ok(),
        );
        if parsed != (Some(dev.0), Some(dev.1)) {
            continue;
        }
        match perms.as_bytes().get(3) {
            Some(b's') => return Mapping::Shared,
            Some(b'p') => private = true,
            _ => {}
        }
    }
    if private {
        Mapping::PrivateOnly
    } else {
        Mapping::Unknown
    }
}

/// How process `pid` maps `file`.
pub(crate) fn mapping_of(pid: u32, file: &std::fs::File) -> Mapping {
    let Ok(meta) = file.metadata() else {
        return Mapping::Unknown;
    };
    let dev = meta.dev();
    let dev = (libc::major(dev), libc::minor(dev));
    match std::fs::read_to_string(format!("/proc/{pid}/maps")) {
        Ok(maps) => mapping_in(&maps, dev, meta.ino()),
        // Another user's process (QEMU run by libvirt as `qemu`): we may not
        // look, and do not guess.
        Err(e) => {
            log::debug!("pci: /proc/{pid}/maps: {e}: cannot check how guest RAM is shared");
            Mapping::Unknown
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
7f0000000000-7f0010000000 rw-p 00000000 00:01 4242                       /memfd:mem (deleted)
7f0020000000-7f0020001000 r--p 00000000 08:02 4242                       /usr/lib/x.so
7f0030000000-7f0030001000 rw-s 00000000 00:01 77                         /memfd:other (deleted)
";

    #[test]
    fn a_file_mapped_only_private_is_told_apart() {
        assert_eq!(mapping_in(MAPS, (0, 1), 4242), Mapping::PrivateOnly);
        assert_eq!(mapping_in(MAPS, (0, 1), 77), Mapping::Shared);
        // Same inode on another device, or not mapped at all.
        assert_eq!(mapping_in(MAPS, (8, 3), 4242), Mapping::Unknown);
        assert_eq!(mapping_in(MAPS, (0, 1), 5), Mapping::Unknown);
        let both = format!("{MAPS}7f0040000000-7f0040001000 rw-s 00000000 00:01 4242 /memfd:mem\n");
        assert_eq!(mapping_in(&both, (0, 1), 4242), Mapping::Shared);
        assert_eq!(
            mapping_in("garbage\n\n1 2 3 4", (0, 1), 4),
            Mapping::Unknown
        );
    }
}
