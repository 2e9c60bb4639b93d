//! The C header generator: turns the ABI's descriptions ([`super::sections`]) into
//! `guest-driver/include/vhca_abi.h` (ARCHITECTURE.md §4: "a generated C header is
//! committed for the driver, with a test that fails when the two disagree").
//!
//! Only layout descriptions are read here, never hand-written C, so the header
//! says what the Rust types say: every struct gets `_Static_assert`s on its size
//! and on every field's offset, checked by the C compiler that builds the driver.

use std::fmt::Write as _;

use super::cmd::{commands, travels_inline, Status, UNKNOWN_STATUS_ERRNO};
use super::ident::ident;
use super::layout::{c_struct_name, ConstGroup, Entry, EnumLayout, Item, StructLayout, Ty};

/// The command that regenerates the committed header.
pub const REGENERATE: &str =
    "cargo run -p device --bin vhca-abi-header > guest-driver/include/vhca_abi.h";

/// Where the committed header lives, relative to the workspace root.
pub const HEADER_PATH: &str = "guest-driver/include/vhca_abi.h";

const WIDTH: usize = 78;

/// The whole header.
pub fn c_header() -> String {
    let mut out = String::new();
    let major = ident::ABI_VERSION >> 16;
    let minor = ident::ABI_VERSION & 0xffff;
    let _ = write!(
        out,
        "/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * vhca_abi.h: the vhca device ABI, version {major}.{minor}.
 *
 * GENERATED from device/src/abi/ (the only source) by
 *     {REGENERATE}
 * Do not edit: change the Rust source and regenerate; device/tests/abi_header.rs
 * fails while this file is stale.
 *
 * All multi-byte fields are little-endian; structs have no implicit padding and
 * every field is naturally aligned.
 */
"
    );
    out.push_str(PRELUDE);
    for section in super::sections() {
        let _ = write!(
            out,
            "\n/* {:=^1$} */\n",
            format!(" {} ", section.title),
            WIDTH - 6
        );
        for e in section.entries {
            out.push('\n');
            match e {
                Entry::Text(t) => block_comment(&mut out, "", &[t]),
                Entry::Consts(g) => consts(&mut out, &g),
                Entry::Enum(e) => enumeration(&mut out, &e),
                Entry::Struct(s) => structure(&mut out, &(s.layout)()),
                Entry::Names {
                    doc,
                    r#macro,
                    names,
                } => name_list(&mut out, doc, &r#macro, &names),
                Entry::Commands => command_table(&mut out),
                Entry::StatusErrno => status_errno(&mut out),
            }
        }
    }
    out.push_str("\n#endif /* VHCA_ABI_H */\n");
    out
}

const PRELUDE: &str = "
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
";

/// Joins `///` lines into paragraphs (an empty line separates them).
fn paragraphs(doc: &[&str]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut cur = String::new();
    for line in doc {
        let l = line.trim();
        if l.is_empty() {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
        } else {
            if !cur.is_empty() {
                cur.push(' ');
            }
            cur.push_str(l);
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Greedy word wrap to `width` columns.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut cur = String::new();
    for word in text.split_whitespace() {
        if !cur.is_empty() && cur.len() + 1 + word.len() > width {
            lines.push(std::mem::take(&mut cur));
        }
        if !cur.is_empty() {
            cur.push(' ');
        }
        cur.push_str(word);
    }
    if !cur.is_empty() {
        lines.push(cur);
    }
    lines
}

/// A C comment of the paragraphs, indented by `indent`: one line if it fits, else
/// a block.
fn block_comment(out: &mut String, indent: &str, paras: &[&str]) {
    let paras: Vec<String> = paras
        .iter()
        .flat_map(|p| p.split("\n\n"))
        .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
        .map(|p| p.replace("*/", "* /"))
        .filter(|p| !p.is_empty())
        .collect();
    if paras.is_empty() {
        return;
    }
    let width = WIDTH - indent.len() - 3;
    if paras.len() == 1 && paras[0].len() + 6 <= width {
        let _ = writeln!(out, "{indent}/* {} */", paras[0]);
        return;
    }
    let _ = writeln!(out, "{indent}/*");
    for (i, p) in paras.iter().enumerate() {
        if i > 0 {
            let _ = writeln!(out, "{indent} *");
        }
        for line in wrap(p, width) {
            let _ = writeln!(out, "{indent} * {line}");
        }
    }
    let _ = writeln!(out, "{indent} */");
}

fn doc_comment(out: &mut String, indent: &str, doc: &[&str]) {
    let paras = paragraphs(doc);
    let refs: Vec<&str> = paras.iter().map(String::as_str).collect();
    block_comment(out, indent, &refs);
}

/// A C integer literal for the Rust literal `lit` (`0x7fff_ffff`, `64`), if it is
/// one, with its value.
fn literal(lit: &str) -> Option<(String, u64)> {
    let digits = lit.replace('_', "");
    let v = match digits.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok()?,
        None => digits.parse().ok()?,
    };
    Some((digits, v))
}

/// The C text of item `i`: its Rust expression when that is a literal or a shift of
/// literals (`1 << 3` becomes `(1U << 3)`), else its value in hex; `U`/`ULL` for
/// 32/64-bit groups so that no shift or comparison is done in `int`.
fn value(i: &Item, repr: &Ty) -> String {
    let suffix = match repr {
        Ty::U64 => "ULL",
        Ty::U32 => "U",
        _ => "",
    };
    if let Some((lit, v)) = literal(i.expr) {
        if v == i.value {
            return format!("{lit}{suffix}");
        }
    }
    if let Some((l, r)) = i.expr.split_once("<<") {
        if let (Some((l, a)), Some((r, b))) = (literal(l.trim()), literal(r.trim())) {
            if a.checked_shl(b as u32) == Some(i.value) {
                return format!("({l}{suffix} << {r})");
            }
        }
    }
    format!("{:#x}{suffix}", i.value)
}

fn c_name(prefix: &str, item: &Item) -> String {
    format!("{prefix}_{}", super::layout::screaming_snake(item.name))
}

fn consts(out: &mut String, g: &ConstGroup) {
    doc_comment(out, "", &g.doc);
    let width = g
        .items
        .iter()
        .map(|i| c_name(g.prefix, i).len())
        .max()
        .unwrap_or(0);
    for i in &g.items {
        doc_comment(out, "", &i.doc);
        let _ = writeln!(
            out,
            "#define {:width$} {}",
            c_name(g.prefix, i),
            value(i, &g.repr)
        );
    }
}

fn enumeration(out: &mut String, e: &EnumLayout) {
    doc_comment(out, "", &e.doc);
    let _ = writeln!(out, "enum {} {{", c_struct_name(e.name));
    for v in &e.variants {
        doc_comment(out, "\t", &v.doc);
        let _ = writeln!(out, "\t{} = {},", c_name(e.prefix, v), value(v, &Ty::U8));
    }
    out.push_str("};\n");
}

fn structure(out: &mut String, s: &StructLayout) {
    let name = c_struct_name(s.name);
    doc_comment(out, "", &s.doc);
    let _ = writeln!(out, "struct {name} {{");
    for f in &s.fields {
        doc_comment(out, "\t", &f.doc);
        let _ = writeln!(out, "\t{};", f.ty.c_decl(f.name));
    }
    out.push_str("};\n");
    let _ = writeln!(
        out,
        "_Static_assert(sizeof(struct {name}) == {}, \"{name}: size\");",
        s.size
    );
    for f in &s.fields {
        let _ = writeln!(
            out,
            "_Static_assert(offsetof(struct {name}, {}) == {}, \"{name}.{}\");",
            f.name, f.offset, f.name
        );
    }
}

fn name_list(out: &mut String, doc: &str, mac: &str, names: &[String]) {
    block_comment(out, "", &[doc]);
    let _ = writeln!(out, "#define {mac} \\");
    for (i, n) in names.iter().enumerate() {
        let sep = if i + 1 < names.len() { ", \\" } else { "" };
        let _ = writeln!(out, "\t\"{n}\"{sep}");
    }
    let count = mac.strip_suffix("_NAMES").unwrap_or(mac);
    let _ = writeln!(out, "#define {count}_COUNT {}", names.len());
}

fn command_table(out: &mut String) {
    let param = |p: Option<super::layout::StructEntry>| match p {
        None => "-".to_string(),
        Some(s) => {
            let l = (s.layout)();
            let at = if travels_inline(&l) {
                "inline"
            } else {
                "mailbox"
            };
            format!("struct {} ({at})", c_struct_name(l.name))
        }
    };
    let mut lines = vec!["Commands: opcode, input, output.".to_string()];
    let opcodes = super::cmd::Opcode::layout();
    for c in commands() {
        let item = opcodes
            .variants
            .iter()
            .find(|v| v.value == u64::from(c.opcode.raw()));
        let name = item.map_or_else(String::new, |i| c_name(opcodes.prefix, i));
        lines.push(format!(
            "{name}: in {}; out {}.",
            param(c.input),
            param(c.output)
        ));
    }
    let _ = writeln!(out, "/*");
    for (i, l) in lines.iter().enumerate() {
        for (j, w) in wrap(l, WIDTH - 7).iter().enumerate() {
            let lead = if i == 0 || j == 0 { "" } else { "    " };
            let _ = writeln!(out, " * {lead}{w}");
        }
    }
    let _ = writeln!(out, " */");
    out.push_str("#define VHCA_CMD_IN_MAILBOX(type) (sizeof(type) > VHCA_CMD_INLINE_SIZE)\n");
}

fn status_errno(out: &mut String) {
    let layout = Status::layout();
    block_comment(
        out,
        "",
        &["The errno (negative) of a command status; 0 for VHCA_STATUS_OK."],
    );
    out.push_str("static inline int vhca_status_errno(unsigned int status)\n{\n");
    out.push_str("\tswitch (status) {\n");
    for (s, item) in Status::ALL.iter().zip(&layout.variants) {
        let ret = match s.errno() {
            None => "0".to_string(),
            Some(e) => format!("-{}", e.name()),
        };
        let _ = writeln!(
            out,
            "\tcase {}:\n\t\treturn {ret};",
            c_name(layout.prefix, item)
        );
    }
    let _ = writeln!(
        out,
        "\tdefault:\n\t\treturn -{};\n\t}}\n}}",
        UNKNOWN_STATUS_ERRNO.name()
    );
}
