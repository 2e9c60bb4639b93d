//! The declarative source of the ABI (ARCHITECTURE.md §4: "the ABI lives once, in Rust").
//!
//! Three macros describe every guest-visible item once:
//!
//! - `abi_struct!` makes a `#[repr(C)]` struct with little-endian
//!   `to_bytes` / `from_bytes`, compile-time checks (declared size, no padding, every
//!   field naturally aligned) and a [`StructLayout`] (names, C types, offsets);
//! - `abi_enum!` makes a `#[repr(uN)]` enum with `raw` / `from_raw` and an
//!   [`EnumLayout`];
//! - `abi_consts!` makes a module of constants (register offsets, bits, limits) and a
//!   [`ConstGroup`].
//!
//! The C generator ([`super::header`]) reads only these descriptions, so the header
//! cannot say anything the Rust types do not.
//!
//! Byte order: every multi-byte field is little-endian in guest memory and in BAR
//! space (PCI is little-endian; the guest is x86-64). `from_bytes` is total: any
//! bytes decode to a value, so a struct read from guest memory never fails to parse;
//! the device validates field values afterwards (ARCHITECTURE.md §9).

use std::fmt::Write as _;

/// A fixed-size value of the ABI: an unsigned integer, an array of fields or an
/// `abi_struct!`.
pub trait Field: Copy {
    /// Bytes in guest memory.
    const SIZE: usize;
    /// Natural alignment (the C compiler's on x86-64).
    const ALIGN: usize;
    /// All bytes zero.
    const ZERO: Self;
    /// The C type.
    fn ty() -> Ty;
    /// Writes `self`, little-endian, into `out[..Self::SIZE]`.
    fn put(&self, out: &mut [u8]);
    /// Reads a value from `src[..Self::SIZE]`.
    fn get(src: &[u8]) -> Self;
}

/// A struct made by `abi_struct!`.
pub trait AbiStruct: Field {
    /// Names, types and offsets of the fields.
    fn layout() -> StructLayout;
}

macro_rules! primitive_field {
    ($($t:ty => $ty:ident),* $(,)?) => {$(
        impl Field for $t {
            const SIZE: usize = core::mem::size_of::<$t>();
            const ALIGN: usize = core::mem::align_of::<$t>();
            const ZERO: $t = 0;
            fn ty() -> Ty {
                Ty::$ty
            }
            fn put(&self, out: &mut [u8]) {
                out[..Self::SIZE].copy_from_slice(&self.to_le_bytes());
            }
            fn get(src: &[u8]) -> $t {
                let mut b = [0u8; core::mem::size_of::<$t>()];
                b.copy_from_slice(&src[..Self::SIZE]);
                <$t>::from_le_bytes(b)
            }
        }
    )*};
}

primitive_field!(u8 => U8, u16 => U16, u32 => U32, u64 => U64);

impl<T: Field, const N: usize> Field for [T; N] {
    const SIZE: usize = T::SIZE * N;
    const ALIGN: usize = T::ALIGN;
    const ZERO: [T; N] = [T::ZERO; N];
    fn ty() -> Ty {
        Ty::Array(Box::new(T::ty()), N)
    }
    fn put(&self, out: &mut [u8]) {
        for (v, chunk) in self.iter().zip(out.chunks_exact_mut(T::SIZE)) {
            v.put(chunk);
        }
    }
    fn get(src: &[u8]) -> [T; N] {
        core::array::from_fn(|i| T::get(&src[i * T::SIZE..]))
    }
}

/// The C type of a field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ty {
    U8,
    U16,
    U32,
    U64,
    /// `elem name[n]`.
    Array(Box<Ty>, usize),
    /// Another ABI struct, by its Rust name.
    Struct(&'static str),
}

impl Ty {
    /// The C declaration of a field of this type called `name`, e.g. `__u8 dgid[16]`.
    pub fn c_decl(&self, name: &str) -> String {
        let mut dims = String::new();
        let mut t = self;
        while let Ty::Array(elem, n) = t {
            let _ = write!(dims, "[{n}]");
            t = elem;
        }
        let base = match t {
            Ty::U8 => "__u8".to_string(),
            Ty::U16 => "__u16".to_string(),
            Ty::U32 => "__u32".to_string(),
            Ty::U64 => "__u64".to_string(),
            Ty::Struct(s) => format!("struct {}", c_struct_name(s)),
            Ty::Array(..) => unreachable!("arrays were unwrapped above"),
        };
        format!("{base} {name}{dims}")
    }

    /// The Rust name of a struct this type uses, if any (itself or its elements).
    pub fn struct_name(&self) -> Option<&'static str> {
        match self {
            Ty::Struct(s) => Some(s),
            Ty::Array(elem, _) => elem.struct_name(),
            _ => None,
        }
    }
}

/// One field of an ABI struct.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldLayout {
    pub name: &'static str,
    pub doc: Vec<&'static str>,
    pub offset: usize,
    pub size: usize,
    pub align: usize,
    pub ty: Ty,
}

/// An ABI struct: what the C generator and the layout tests need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StructLayout {
    /// The Rust name; the C name is [`c_struct_name`] of it.
    pub name: &'static str,
    pub doc: Vec<&'static str>,
    pub size: usize,
    pub align: usize,
    pub fields: Vec<FieldLayout>,
}

/// A named number with its documentation: an enum variant or a constant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub name: &'static str,
    pub value: u64,
    /// The Rust expression as written (`0x0200`, `1 << 3`), so the header keeps
    /// the author's radix; the generator uses it only when it is a plain literal
    /// or a shift of literals, and checks it against `value`.
    pub expr: &'static str,
    pub doc: Vec<&'static str>,
}

/// An `abi_enum!`: C `enum` whose enumerators are `PREFIX_VARIANT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnumLayout {
    pub name: &'static str,
    pub prefix: &'static str,
    pub doc: Vec<&'static str>,
    pub repr: Ty,
    pub variants: Vec<Item>,
}

/// An `abi_consts!` module: C `#define PREFIX_NAME value` lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConstGroup {
    pub name: &'static str,
    pub prefix: &'static str,
    pub doc: Vec<&'static str>,
    pub repr: Ty,
    pub items: Vec<Item>,
}

/// `QueryDevice` -> `QUERY_DEVICE`, `Eq0Base` -> `EQ0_BASE`, `M256` -> `M256`.
pub fn screaming_snake(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 4);
    let mut prev: Option<char> = None;
    for c in camel.chars() {
        if c.is_ascii_uppercase()
            && prev.is_some_and(|p| p.is_ascii_lowercase() || p.is_ascii_digit())
        {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
        prev = Some(c);
    }
    out
}

/// The C tag of an ABI struct or enum: `CreateQpIn` -> `vhca_create_qp_in`.
pub fn c_struct_name(rust: &str) -> String {
    format!("vhca_{}", screaming_snake(rust).to_ascii_lowercase())
}

/// Makes a `#[repr(C)]` ABI struct; see the module documentation. The literal after
/// the name is the size the documentation promises; the build fails if the fields
/// do not add up to it exactly or one is not naturally aligned.
macro_rules! abi_struct {
    (
        $(#[doc = $doc:literal])*
        pub struct $name:ident ($size:literal) {
            $(
                $(#[doc = $fdoc:literal])*
                pub $field:ident : $ty:ty,
            )*
        }
    ) => {
        $(#[doc = $doc])*
        #[repr(C)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub struct $name {
            $(
                $(#[doc = $fdoc])*
                pub $field: $ty,
            )*
        }

        // Field alignment may be 1, which makes one of these a `% 1`.
        #[allow(clippy::modulo_one)]
        const _: () = {
            use $crate::abi::layout::Field;
            assert!(
                core::mem::size_of::<$name>() == $size,
                concat!(stringify!($name), ": size differs from the declared size")
            );
            assert!(
                0 $(+ <$ty as Field>::SIZE)* == $size,
                concat!(stringify!($name), ": implicit padding between fields")
            );
            $(
                assert!(
                    core::mem::offset_of!($name, $field) % <$ty as Field>::ALIGN == 0,
                    concat!(stringify!($name), ".", stringify!($field), ": not naturally aligned")
                );
            )*
        };

        impl $name {
            /// Bytes in guest memory.
            pub const SIZE: usize = $size;

            /// The little-endian bytes the guest sees.
            pub fn to_bytes(&self) -> [u8; $size] {
                let mut b = [0u8; $size];
                $crate::abi::layout::Field::put(self, &mut b);
                b
            }

            /// Decodes guest bytes; total (every byte pattern is a value).
            pub fn from_bytes(b: &[u8; $size]) -> $name {
                <$name as $crate::abi::layout::Field>::get(b)
            }

            /// Decodes the first [`Self::SIZE`] bytes of `b`; `None` if it is shorter.
            pub fn from_prefix(b: &[u8]) -> Option<$name> {
                let b: &[u8; $size] = b.get(..$size)?.try_into().ok()?;
                Some($name::from_bytes(b))
            }
        }

        impl Default for $name {
            fn default() -> $name {
                <$name as $crate::abi::layout::Field>::ZERO
            }
        }

        impl $crate::abi::layout::Field for $name {
            const SIZE: usize = $size;
            const ALIGN: usize = core::mem::align_of::<$name>();
            const ZERO: $name = $name {
                $($field: <$ty as $crate::abi::layout::Field>::ZERO,)*
            };
            fn ty() -> $crate::abi::layout::Ty {
                $crate::abi::layout::Ty::Struct(stringify!($name))
            }
            fn put(&self, out: &mut [u8]) {
                $(
                    let at = core::mem::offset_of!($name, $field);
                    let end = at + <$ty as $crate::abi::layout::Field>::SIZE;
                    $crate::abi::layout::Field::put(&self.$field, &mut out[at..end]);
                )*
            }
            fn get(src: &[u8]) -> $name {
                $name {
                    $(
                        $field: <$ty as $crate::abi::layout::Field>::get(
                            &src[core::mem::offset_of!($name, $field)..],
                        ),
                    )*
                }
            }
        }

        impl $crate::abi::layout::AbiStruct for $name {
            fn layout() -> $crate::abi::layout::StructLayout {
                use $crate::abi::layout::Field;
                $crate::abi::layout::StructLayout {
                    name: stringify!($name),
                    doc: vec![$($doc),*],
                    size: $size,
                    align: <$name as Field>::ALIGN,
                    fields: vec![$(
                        $crate::abi::layout::FieldLayout {
                            name: stringify!($field),
                            doc: vec![$($fdoc),*],
                            offset: core::mem::offset_of!($name, $field),
                            size: <$ty as Field>::SIZE,
                            align: <$ty as Field>::ALIGN,
                            ty: <$ty as Field>::ty(),
                        },
                    )*],
                }
            }
        }
    };
}

/// Makes a `#[repr(uN)]` ABI enum whose C enumerators are `PREFIX_VARIANT`.
macro_rules! abi_enum {
    (
        $(#[doc = $doc:literal])*
        pub enum $name:ident : $repr:ident = $prefix:literal {
            $(
                $(#[doc = $vdoc:literal])*
                $variant:ident = $value:expr,
            )*
        }
    ) => {
        $(#[doc = $doc])*
        #[repr($repr)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $(
                $(#[doc = $vdoc])*
                $variant = $value,
            )*
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),*];

            /// The number in guest memory.
            pub const fn raw(self) -> $repr {
                self as $repr
            }

            /// The variant numbered `v`, if any.
            pub fn from_raw(v: $repr) -> Option<$name> {
                $name::ALL.iter().copied().find(|x| x.raw() == v)
            }

            /// Names, numbers and documentation, for the C generator.
            pub fn layout() -> $crate::abi::layout::EnumLayout {
                $crate::abi::layout::EnumLayout {
                    name: stringify!($name),
                    prefix: $prefix,
                    doc: vec![$($doc),*],
                    repr: <$repr as $crate::abi::layout::Field>::ty(),
                    variants: vec![$(
                        $crate::abi::layout::Item {
                            name: stringify!($variant),
                            value: $name::$variant as u64,
                            expr: stringify!($value),
                            doc: vec![$($vdoc),*],
                        },
                    )*],
                }
            }
        }
    };
}

/// Makes a module of ABI constants whose C names are `PREFIX_NAME`.
macro_rules! abi_consts {
    (
        $(#[doc = $doc:literal])*
        pub mod $name:ident : $repr:ident = $prefix:literal {
            $(
                $(#[doc = $cdoc:literal])*
                $cname:ident = $value:expr,
            )*
        }
    ) => {
        $(#[doc = $doc])*
        pub mod $name {
            $(
                $(#[doc = $cdoc])*
                pub const $cname: $repr = $value;
            )*

            /// Names, values and documentation, for the C generator.
            #[allow(clippy::unnecessary_cast)]
            pub fn layout() -> $crate::abi::layout::ConstGroup {
                $crate::abi::layout::ConstGroup {
                    name: stringify!($name),
                    prefix: $prefix,
                    doc: vec![$($doc),*],
                    repr: <$repr as $crate::abi::layout::Field>::ty(),
                    items: vec![$(
                        $crate::abi::layout::Item {
                            name: stringify!($cname),
                            value: $cname as u64,
                            expr: stringify!($value),
                            doc: vec![$($cdoc),*],
                        },
                    )*],
                }
            }
        }
    };
}

/// Defines a `pub const NAME: &str` whose rustdoc is its own text, so that prose
/// emitted into the C header is also read in rustdoc, from one literal.
macro_rules! abi_text {
    ($(#[doc = $doc:literal])* pub const $name:ident = $text:literal;) => {
        $(#[doc = $doc])*
        ///
        #[doc = $text]
        pub const $name: &str = $text;
    };
}

/// One registered struct: its layout and a bytes -> value -> bytes round trip.
#[derive(Clone, Copy)]
pub struct StructEntry {
    pub layout: fn() -> StructLayout,
    pub roundtrip: fn(&[u8]) -> Vec<u8>,
}

fn roundtrip<T: AbiStruct>(b: &[u8]) -> Vec<u8> {
    let v = T::get(b);
    let mut out = vec![0u8; T::SIZE];
    v.put(&mut out);
    out
}

/// The registry entry of `T`.
pub fn entry<T: AbiStruct>() -> StructEntry {
    StructEntry {
        layout: T::layout,
        roundtrip: roundtrip::<T>,
    }
}

/// What a header section holds, in output order.
#[derive(Clone)]
pub enum Entry {
    /// Prose (an `abi_text!`), emitted as a block comment.
    Text(&'static str),
    Consts(ConstGroup),
    Enum(EnumLayout),
    Struct(StructEntry),
    /// A list of names: `#define MACRO "a", "b"` (for an array initialiser) and
    /// `#define MACRO_COUNT n` (with `_NAMES` replaced by `_COUNT`).
    Names {
        doc: &'static str,
        r#macro: String,
        names: Vec<String>,
    },
    /// The table of commands and their parameter structs (`cmd::commands`).
    Commands,
    /// `vhca_status_errno()`, from `cmd::Status::errno`.
    StatusErrno,
}

/// One topic of the ABI (a file of this module), as the header shows it.
#[derive(Clone)]
pub struct Section {
    pub title: &'static str,
    pub entries: Vec<Entry>,
}
