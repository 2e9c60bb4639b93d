//! `vhca topology`'s command line (issue 27 item 1): which shape, how big,
//! from which UDP port; prints the fabric file (`fabric::topology_text`) to
//! stdout. Every problem is a clap error with the usage line, naming the
//! argument.

use clap::{Args, Parser, Subcommand};

use crate::fabric::{topology_text, Shape, Topology};
use crate::mgmt::SubnetMode;

/// Writes a fabric file (TOML, to stdout) for a common topology: HCAs n0,
/// n1, ... and their switches, every cable a [[link]], UDP addresses on
/// 127.0.0.1 (or the --machines) counting up from --base-port (the HCAs first,
/// then each switch's ports).
///
///   vhca topology fat-tree --leaves 4 --spines 2 --hosts-per-leaf 4 --base-port 30000 > fabric.toml
///   vhca switch --fabric fabric.toml --switch leaf0 &   (each leaf*, spine*)
///   vhca --socket /tmp/vhca/n0.sock --fabric fabric.toml --node n0 &   (each n*)
#[derive(Debug, Clone, Parser)]
#[command(
    name = "vhca topology",
    bin_name = "vhca topology",
    version,
    verbatim_doc_comment
)]
pub struct TopologyCli {
    #[command(subcommand)]
    pub shape: ShapeCmd,
}

/// The shapes.
#[derive(Debug, Clone, Subcommand)]
pub enum ShapeCmd {
    /// A two-level fat tree: every leaf cabled once to every spine, HCAs on
    /// the leaves (leaf ports 1..=H to HCAs, H+1.. to the spines; spine
    /// port i+1 to leaf i).
    FatTree {
        /// Leaf switches (1..=36).
        #[arg(long)]
        leaves: usize,
        /// Spine switches.
        #[arg(long)]
        spines: usize,
        /// HCAs on each leaf (with the spines, at most 36 leaf ports).
        #[arg(long)]
        hosts_per_leaf: usize,
        #[command(flatten)]
        common: Common,
    },
    /// Switches in a row sw0 - sw1 - ..., HCAs on each (ports 1..=H to HCAs,
    /// H+1 to the previous switch, H+2 to the next).
    Line(Chain),
    /// A line of 3 or more switches whose last is cabled back to the first.
    Ring(Chain),
}

/// A line's or a ring's size.
#[derive(Debug, Clone, Args)]
pub struct Chain {
    /// Switches (a line 1 or more, a ring 3 or more).
    #[arg(long)]
    pub switches: usize,
    /// HCAs on each switch.
    #[arg(long)]
    pub hosts: usize,
    #[command(flatten)]
    pub common: Common,
}

/// What every shape takes.
#[derive(Debug, Clone, Args)]
pub struct Common {
    /// The first UDP port on 127.0.0.1 (the HCAs', then the switches').
    #[arg(long, value_name = "PORT", default_value_t = 30000, value_parser = clap::value_parser!(u16).range(1..))]
    pub base_port: u16,
    /// `static` (the file's LIDs and shortest-path routes, no SM) or `sm`
    /// (ports wait for a subnet manager).
    #[arg(long, value_name = "static|sm", default_value = "static", value_parser = ["static", "sm"])]
    pub subnet: String,
    /// Underlay addresses of the machines the fabric spans (issue 27 item 3),
    /// comma-separated: the leaves (or a line's switches) and the spines
    /// are dealt out over them in blocks, each HCA with its switch, each
    /// machine numbering its own UDP ports from --base-port (default: all on
    /// 127.0.0.1).
    #[arg(long, value_name = "IP,IP,...", value_delimiter = ',')]
    pub machines: Vec<std::net::IpAddr>,
    /// A fabric key file for the file's `key_file` (a fabric that leaves
    /// one host should authenticate its datagrams).
    #[arg(long, value_name = "PATH")]
    pub key_file: Option<String>,
    /// Every HCA's LID mask control (0..=7): 2^LMC LIDs each from a base LID
    /// that is a multiple of 2^LMC. On a fat tree with 2^LMC a multiple of
    /// the spines, static routing sends LID base + j through spine j: base
    /// and base + 1 are disjoint paths (APM's primary and alternate).
    #[arg(long, value_name = "LMC", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=7))]
    pub lmc: u8,
}

impl TopologyCli {
    /// The fabric file's text, or why it cannot be written (sizes that need
    /// each other: a clap error with the usage line).
    pub fn text(&self) -> Result<String, clap::Error> {
        let sub = match &self.shape {
            ShapeCmd::FatTree { .. } => "fat-tree",
            ShapeCmd::Line(_) => "line",
            ShapeCmd::Ring(_) => "ring",
        };
        let (shape, common) = match &self.shape {
            ShapeCmd::FatTree {
                leaves,
                spines,
                hosts_per_leaf,
                common,
            } => (
                Shape::FatTree {
                    leaves: *leaves,
                    spines: *spines,
                    hosts_per_leaf: *hosts_per_leaf,
                },
                common,
            ),
            ShapeCmd::Line(c) => (
                Shape::Line {
                    switches: c.switches,
                    hosts: c.hosts,
                },
                &c.common,
            ),
            ShapeCmd::Ring(c) => (
                Shape::Ring {
                    switches: c.switches,
                    hosts: c.hosts,
                },
                &c.common,
            ),
        };
        let subnet = if common.subnet == "sm" {
            SubnetMode::Sm
        } else {
            SubnetMode::Static
        };
        topology_text(&Topology {
            hosts: common.machines.clone(),
            key_file: common.key_file.clone(),
            lmc: common.lmc,
            ..Topology::new(shape, common.base_port, subnet)
        })
        .map_err(|e| crate::units::usage_error::<TopologyCli>(Some(sub), e.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::FabricFile;
    use crate::units::ParseArgs;

    fn run(args: &[&str]) -> Result<String, String> {
        let mut argv = vec!["vhca topology"];
        argv.extend_from_slice(args);
        TopologyCli::parse_args(argv)
            .map_err(|e| e.to_string())?
            .text()
            .map_err(|e| e.to_string())
    }

    #[test]
    fn vhca_topology_writes_each_shape_and_refuses_bad_arguments_with_the_usage_line() {
        let t = run(&[
            "fat-tree",
            "--leaves",
            "4",
            "--spines",
            "2",
            "--hosts-per-leaf",
            "4",
            "--base-port",
            "31000",
            "--subnet",
            "sm",
        ])
        .unwrap();
        let f = FabricFile::parse("t", &t).unwrap();
        assert_eq!(f.subnet(), SubnetMode::Sm);
        assert_eq!(f.nodes()[0].address.port(), 31000);
        assert_eq!(f.cabling().switches().len(), 6);
        let t = run(&["line", "--switches", "2", "--hosts", "2", "--lmc", "2"]).unwrap();
        let f = FabricFile::parse("t", &t).unwrap();
        assert_eq!(f.nodes()[1].lid, 8);
        assert_eq!(f.port_attrs("n1").unwrap().lmc, 2);
        for shape in ["line", "ring"] {
            let t = run(&[shape, "--switches", "3", "--hosts", "2"]).unwrap();
            let f = FabricFile::parse("t", &t).unwrap();
            assert_eq!((f.nodes().len(), f.subnet()), (6, SubnetMode::Static));
            assert_eq!(f.nodes()[0].address.port(), 30000);
        }
        for (args, why) in [
            (
                &[
                    "fat-tree",
                    "--leaves",
                    "0",
                    "--spines",
                    "1",
                    "--hosts-per-leaf",
                    "1",
                ][..],
                "--leaves 0: at least 1",
            ),
            (
                &[
                    "line",
                    "--switches",
                    "2",
                    "--hosts",
                    "1",
                    "--base-port",
                    "70000",
                ],
                "'--base-port <PORT>': 70000 is not in 1..=65535",
            ),
            (
                &["ring", "--switches", "3", "--hosts", "40"],
                "would need 42 ports: a switch has at most 36",
            ),
            (
                &[
                    "line",
                    "--switches",
                    "3",
                    "--hosts",
                    "1",
                    "--base-port",
                    "65530",
                ],
                "pass 65535",
            ),
        ] {
            let e = run(args).unwrap_err();
            assert!(e.contains(why), "{args:?}: {e}");
            let usage = format!("\nUsage: vhca topology {} ", args[0]);
            assert!(e.contains(&usage), "{args:?}: {e}");
        }
    }
}
