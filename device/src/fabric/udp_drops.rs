//! The kernel's count of datagrams it dropped on one UDP socket (a full
//! receive buffer): the `drops` column of `/proc/net/udp` (and `udp6`), the
//! row found by the socket's inode. Link flow control (issue 27 item 4)
//! exists to keep it at zero, so the reports show it next to the link's own
//! drops.

use std::os::fd::RawFd;
use std::os::unix::fs::MetadataExt;

/// The kernel's drop count for the socket `fd`, or `None` where `/proc`
/// does not say (not Linux, no such row).
pub fn socket_drops(fd: RawFd) -> Option<u64> {
    let inode = std::fs::metadata(format!("/proc/self/fd/{fd}")).ok()?.ino();
    ["/proc/net/udp", "/proc/net/udp6"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .find_map(|t| drops_in(&t, inode))
}

/// The `drops` of the row of socket `inode` in a `/proc/net/udp` text.
fn drops_in(table: &str, inode: u64) -> Option<u64> {
    table.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        // sl local rem st tx:rx tr:tm retrnsmt uid timeout inode ref ptr drops
        (f.get(9)?.parse::<u64>().ok()? == inode).then(|| f.get(12)?.parse().ok())?
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn the_drops_column_of_the_sockets_own_row() {
        let t = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
                 6761: 0100007F:80FD 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 44591530 2 000000002e04f1f6 0\n\
                 6762: 0100007F:80FE 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 44592674 2 00000000bd6db87a 17\n";
        assert_eq!(drops_in(t, 44592674), Some(17));
        assert_eq!(drops_in(t, 44591530), Some(0));
        assert_eq!(drops_in(t, 1), None);
    }

    #[test]
    fn a_socket_whose_buffer_overflows_shows_its_kernel_drops() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        socket2::SockRef::from(&rx)
            .set_recv_buffer_size(4096)
            .unwrap();
        assert_eq!(socket_drops(rx.as_raw_fd()), Some(0));
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        for _ in 0..200 {
            let _ = tx.send_to(&[0u8; 1400], rx.local_addr().unwrap());
        }
        assert!(socket_drops(rx.as_raw_fd()).unwrap() > 0);
    }
}
