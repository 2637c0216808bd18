//! [`WireName`]: a name in lower-case wire form (length-prefixed labels, the root's empty label
//! last), shared, not copied. One allocation stands for a name wherever the agent holds it: the
//! group that brought it (as the name its records share; other names a group holds are packed
//! into its bytes and interned again when read, see `records::RecordGroup`), the table compiler,
//! the table, the reverse index and the kernel table's writer all keep clones of the same
//! reference (8 bytes each: a thin pointer to the count, the
//! length and the bytes, where a slice's `Arc` takes 16 in every holder), where a hickory `Name`
//! is some 80 bytes inline and a heap copy past 32 bytes of labels, per holder. At 100,000 names
//! of three addresses the thin reference saved about 10 MB: every record, map key and reverse
//! index entry holds one.
//!
//! It hashes and compares as its bytes, so maps keyed by it are searched with a `&[u8]` in
//! wire form without building one ([`std::borrow::Borrow`]).
//!
//! Names made from text or wire bytes are interned: the same name made twice (every pod of a
//! name brings it, a record file repeats it per record) is one allocation. The interner holds a
//! reference to each name it has given out, and drops those nobody else holds whenever it has
//! doubled since it last looked, so a name gone from every source is freed soon after.

use std::{
    borrow::Borrow,
    cmp::Ordering,
    fmt,
    hash::{Hash, Hasher},
    sync::Mutex,
};

use rustc_hash::FxHashSet;
use triomphe::ThinArc;

use hickory_proto::rr::{LowerName, Name};

/// The most bytes a name takes in wire form (RFC 1035 §3.1).
pub const MAX_WIRE_LEN: usize = 255;

/// Compares, orders and hashes as its bytes (as `[u8]` does: maps keyed by it are searched with
/// a slice).
#[derive(Clone)]
pub struct WireName(ThinArc<(), u8>);

impl PartialEq for WireName {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for WireName {}

impl PartialOrd for WireName {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for WireName {
    fn cmp(&self, other: &Self) -> Ordering {
        self.as_bytes().cmp(other.as_bytes())
    }
}

impl Hash for WireName {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl WireName {
    /// The root name.
    pub fn root() -> Self {
        Self(ThinArc::from_header_and_slice((), &[0]))
    }

    /// `name` in lower-case wire form.
    pub fn from_name(name: &Name) -> Self {
        let mut wire = Vec::with_capacity(name.len() + 1);
        write_lower(name, &mut wire);
        intern(&wire)
    }

    /// A name already lower-cased.
    pub fn from_lower(name: &LowerName) -> Self {
        let name: &Name = name.borrow();
        Self::from_name(name)
    }

    /// A name from wire bytes, checked (labels of 1 to 63 bytes, the root last, at most 255
    /// bytes) and lower-cased.
    pub fn from_wire(wire: &[u8]) -> Option<Self> {
        let mut at = 0;
        loop {
            let len = usize::from(*wire.get(at)?);
            if len == 0 {
                break;
            }
            if len > 63 {
                return None;
            }
            at += 1 + len;
        }
        if at + 1 != wire.len() || wire.len() > MAX_WIRE_LEN {
            return None;
        }
        Some(intern(&wire.to_ascii_lowercase()))
    }

    /// The bytes: lower-case wire form.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0.slice
    }

    /// As a hickory name (for answers).
    pub fn to_name(&self) -> Name {
        let labels = self.labels();
        let mut name = Name::from_labels(labels).unwrap_or_else(|_| Name::root());
        name.set_fqdn(true);
        name
    }

    /// The labels, left to right (the root's not included).
    pub fn labels(&self) -> impl Iterator<Item = &[u8]> + '_ {
        labels(self.as_bytes())
    }

    /// How many labels (the root's not counted).
    pub fn label_count(&self) -> usize {
        self.labels().count()
    }

    pub fn is_root(&self) -> bool {
        self.as_bytes().len() == 1
    }

    /// The name one label up (None for the root).
    pub fn parent(&self) -> Option<Self> {
        let bytes = self.as_bytes();
        let first = usize::from(*bytes.first()?);
        if first == 0 {
            return None;
        }
        Some(intern(bytes.get(1 + first..)?))
    }

    /// Whether this name is `zone` or below it.
    pub fn is_in(&self, zone: &WireName) -> bool {
        let (name, zone) = (self.as_bytes(), zone.as_bytes());
        if zone.len() > name.len() || !name.ends_with(zone) {
            return false;
        }
        // The suffix must start at a label boundary.
        let start = name.len() - zone.len();
        let mut at = 0;
        while at < start {
            at += 1 + usize::from(name[at]);
        }
        at == start
    }
}

/// Appends `name`'s labels, lower-cased, and the root label to `out`.
pub fn write_lower(name: &Name, out: &mut Vec<u8>) {
    for label in name.iter() {
        out.push(label.len() as u8);
        out.extend(label.iter().map(u8::to_ascii_lowercase));
    }
    out.push(0);
}

/// The names given out, each once (see the module's text).
struct Interner {
    names: FxHashSet<WireName>,
    /// How many names the last sweep kept.
    kept: usize,
}

/// Below this many names the interner never sweeps.
const SWEEP_FLOOR: usize = 4096;

static INTERNER: Mutex<Option<Interner>> = Mutex::new(None);

/// The one `WireName` for these lower-case wire bytes.
fn intern(wire: &[u8]) -> WireName {
    let mut guard = INTERNER.lock().unwrap_or_else(|e| e.into_inner());
    let interner = guard.get_or_insert_with(|| Interner {
        names: FxHashSet::default(),
        kept: 0,
    });
    if let Some(name) = interner.names.get(wire) {
        return name.clone();
    }
    let name = WireName(ThinArc::from_header_and_slice((), wire));
    interner.names.insert(name.clone());
    if interner.names.len() > 2 * interner.kept.max(SWEEP_FLOOR) {
        // Names only the interner still holds are gone from every source: freed.
        interner.names.retain(|n| ThinArc::strong_count(&n.0) > 1);
        interner.kept = interner.names.len();
    }
    name
}

impl Borrow<[u8]> for WireName {
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl From<&Name> for WireName {
    fn from(name: &Name) -> Self {
        Self::from_name(name)
    }
}

impl From<&WireName> for Name {
    fn from(name: &WireName) -> Self {
        name.to_name()
    }
}

/// The labels of a name in wire form, left to right (the root's not included).
fn labels(wire: &[u8]) -> impl Iterator<Item = &[u8]> + '_ {
    let mut rest = wire;
    std::iter::from_fn(move || {
        let (&len, tail) = rest.split_first()?;
        if len == 0 {
            return None;
        }
        let (label, tail) = tail.split_at_checked(usize::from(len))?;
        rest = tail;
        Some(label)
    })
}

/// A name's wire-form bytes shown in presentation form, with the final dot, without making a
/// [`WireName`] of them (no allocation, no interning): how a group's packed names are written out.
pub struct WireText<'a>(pub &'a [u8]);

impl fmt::Display for WireName {
    /// Presentation form, with the final dot.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&WireText(self.as_bytes()), f)
    }
}

impl fmt::Display for WireText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.len() == 1 {
            return f.write_str(".");
        }
        for label in labels(self.0) {
            for &byte in label {
                if byte.is_ascii_graphic() && byte != b'.' && byte != b'\\' {
                    write!(f, "{}", byte as char)?;
                } else {
                    write!(f, "\\{byte:03}")?;
                }
            }
            f.write_str(".")?;
        }
        Ok(())
    }
}

impl fmt::Debug for WireName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_made_twice_is_one_allocation_and_freed_when_nobody_holds_it() {
        let a = WireName::from_name(&Name::from_ascii("Web.Interned.Example.").unwrap());
        let b = WireName::from_wire(b"\x03web\x08interned\x07example\x00").unwrap();
        let same = |a: &WireName, b: &WireName| std::ptr::eq(a.as_bytes(), b.as_bytes());
        assert!(same(&a, &b), "one allocation");
        assert!(same(&a.parent().unwrap(), &b.parent().unwrap()));
        assert_eq!(ThinArc::strong_count(&a.0), 3, "a, b and the interner's");
        drop((a, b));
        // Enough other names to make the interner sweep, however many it held.
        let held = INTERNER
            .lock()
            .unwrap()
            .as_ref()
            .map_or(0, |i| i.names.len().max(i.kept));
        let others: Vec<WireName> = (0..2 * held.max(SWEEP_FLOOR) + 1)
            .map(|i| {
                WireName::from_name(&Name::from_ascii(format!("n{i}.sweep.example.")).unwrap())
            })
            .collect();
        let kept = INTERNER
            .lock()
            .unwrap()
            .as_ref()
            .map(|i| i.names.contains(&b"\x03web\x08interned\x07example\x00"[..]));
        assert_eq!(
            kept,
            Some(false),
            "dropped by the interner (and so freed) once only the interner held it"
        );
        drop(others);
    }

    fn name(text: &str) -> Name {
        Name::from_ascii(text).unwrap()
    }

    #[test]
    fn a_name_round_trips_lower_cased() {
        let wire = WireName::from_name(&name("Web.Prod.Example."));
        assert_eq!(wire.as_bytes(), b"\x03web\x04prod\x07example\x00");
        assert_eq!(wire.to_name(), name("web.prod.example."));
        assert_eq!(wire.to_string(), "web.prod.example.");
        assert_eq!(wire.label_count(), 3);
        assert_eq!(WireName::root().to_string(), ".");
        assert_eq!(WireName::from_wire(wire.as_bytes()), Some(wire.clone()));
        assert_eq!(
            WireName::from_wire(b"\x03WEB\x00").map(|n| n.to_string()),
            Some("web.".into())
        );
    }

    #[test]
    fn malformed_wire_is_refused() {
        assert_eq!(WireName::from_wire(b""), None);
        assert_eq!(WireName::from_wire(b"\x03ab"), None);
        assert_eq!(WireName::from_wire(b"\x01a\x00junk"), None);
        assert_eq!(WireName::from_wire(&[64; 66]), None);
    }

    #[test]
    fn parents_and_zones_follow_label_boundaries() {
        let web = WireName::from_name(&name("web.prod.example."));
        let prod = WireName::from_name(&name("prod.example."));
        let rod = WireName::from_name(&name("rod.example."));
        assert_eq!(web.parent(), Some(prod.clone()));
        assert!(web.is_in(&prod) && prod.is_in(&prod));
        assert!(!web.is_in(&rod), "a suffix inside a label is no zone");
        assert!(web.is_in(&WireName::root()));
        assert_eq!(WireName::root().parent(), None);
    }

    #[test]
    fn maps_keyed_by_it_are_searched_with_wire_bytes() {
        let mut map = std::collections::HashMap::new();
        map.insert(WireName::from_name(&name("a.example.")), 1);
        assert_eq!(map.get(&b"\x01a\x07example\x00"[..]), Some(&1));
    }
}
