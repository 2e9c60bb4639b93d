//! Two network namespaces standing for two hosts (issue 27 item 3), joined
//! by a veth pair of a given MTU: `vhca` processes run in either side with
//! `ip netns exec` ([`Hosts::wrap`]), the test driver reaches them over their
//! vfio-user sockets, which are files and cross namespaces. Needs
//! CAP_SYS_ADMIN and CAP_NET_ADMIN (root); [`Hosts::new`] says `None` when
//! `ip netns add` is refused, so that an unprivileged run can skip.
//!
//! Names start with `s12mtu-` and carry the process id and a counter; the
//! namespaces (and with them the veth ends inside) are deleted on drop.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Side A's address on the veth; side B's is [`B_ADDR`].
pub const A_ADDR: Ipv4Addr = Ipv4Addr::new(10, 27, 0, 1);
pub const B_ADDR: Ipv4Addr = Ipv4Addr::new(10, 27, 0, 2);

/// Two namespaces joined by a veth pair; deleted on drop.
#[derive(Debug)]
pub struct Hosts {
    pub a: String,
    pub b: String,
    pub mtu: u32,
}

fn ip(args: &[&str]) -> Output {
    Command::new("ip")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run ip {args:?}: {e}"))
}

fn ip_ok(args: &[&str]) {
    let o = ip(args);
    assert!(
        o.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&o.stderr)
    );
}

impl Hosts {
    /// Namespaces A and B, the veth between them with `mtu` on both ends,
    /// [`A_ADDR`] and [`B_ADDR`] on it, loopback up in each. `None` when
    /// the kernel refuses a namespace (no privilege); panics on any other
    /// failure.
    pub fn new(mtu: u32) -> Option<Hosts> {
        static N: AtomicUsize = AtomicUsize::new(0);
        let tag = format!(
            "{}{}",
            std::process::id() % 100_000,
            N.fetch_add(1, Ordering::Relaxed)
        );
        let (a, b) = (format!("s12mtu-{tag}a"), format!("s12mtu-{tag}b"));
        let o = ip(&["netns", "add", &a]);
        if !o.status.success() {
            let err = String::from_utf8_lossy(&o.stderr);
            if err.contains("Operation not permitted") || err.contains("Permission denied") {
                return None;
            }
            panic!("ip netns add {a}: {err}");
        }
        let h = Hosts {
            a: a.clone(),
            b: b.clone(),
            mtu,
        };
        ip_ok(&["netns", "add", &b]);
        // Interface names are at most 15 bytes.
        let (va, vb) = (format!("s12mtu-{tag}x"), format!("s12mtu-{tag}y"));
        ip_ok(&["link", "add", &va, "type", "veth", "peer", "name", &vb]);
        ip_ok(&["link", "set", &va, "netns", &a]);
        ip_ok(&["link", "set", &vb, "netns", &b]);
        let m = mtu.to_string();
        for (ns, dev, addr) in [(&a, &va, A_ADDR), (&b, &vb, B_ADDR)] {
            ip_ok(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev]);
            ip_ok(&["-n", ns, "link", "set", dev, "mtu", &m, "up"]);
            ip_ok(&["-n", ns, "link", "set", "lo", "up"]);
        }
        Some(h)
    }

    /// `ip netns exec NS`: runs a command in namespace `ns`.
    pub fn wrap(ns: &str) -> Vec<String> {
        vec!["ip".into(), "netns".into(), "exec".into(), ns.into()]
    }

    /// Namespace `ns`'s IP counters from its /proc/net/snmp (the `Ip:`
    /// lines: FragCreates, ReasmReqds, ...).
    pub fn ip_counters(ns: &str) -> HashMap<String, u64> {
        let o = Command::new("ip")
            .args(["netns", "exec", ns, "cat", "/proc/net/snmp"])
            .output()
            .expect("read /proc/net/snmp");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        let ip: Vec<&str> = text.lines().filter(|l| l.starts_with("Ip:")).collect();
        assert_eq!(ip.len(), 2, "Ip: header and values in {text}");
        ip[0]
            .split_whitespace()
            .zip(ip[1].split_whitespace())
            .skip(1)
            .map(|(k, v)| (k.to_string(), v.parse().unwrap_or(0)))
            .collect()
    }

    /// Fragments made and reassemblies asked for in namespace `ns`: both
    /// stay put while no datagram is fragmented.
    pub fn fragments(ns: &str) -> (u64, u64) {
        let c = Hosts::ip_counters(ns);
        (c["FragCreates"], c["ReasmReqds"])
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        // Deleting a namespace deletes the veth end in it, and so the pair.
        for ns in [&self.a, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}
