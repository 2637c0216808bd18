//! [`GroupKey`]: a record group's identity within its source.

use std::fmt;

use triomphe::ThinArc;

use hostport_dns_core::dns::WireName;

/// A group's identity within its source: one pod's records (`pod/<output>/<namespace>/<pod>`),
/// one EndpointSlice output's (`endpoints/<output>`), one name of the record file or of the
/// configuration's static records (the name itself). A group with the same key replaces the one
/// before.
///
/// Either kind is one thin reference (the key is 16 bytes, as a `str`'s `Arc` was): a name's key
/// is the name's own reference, shared with its records and the table, where its text took an
/// allocation of its own per name (at 100,000 names, 4.8 MB).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GroupKey {
    Text(KeyText),
    Name(WireName),
}

/// A text key's UTF-8 bytes behind one pointer.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyText(ThinArc<(), u8>);

impl GroupKey {
    /// The key's text, for a text key.
    pub fn text(&self) -> Option<&str> {
        match self {
            // Made from a `str`: always UTF-8.
            Self::Text(text) => std::str::from_utf8(&text.0.slice).ok(),
            Self::Name(_) => None,
        }
    }

    /// Whether it is a text key starting with `prefix`.
    pub fn starts_with(&self, prefix: &str) -> bool {
        self.text().is_some_and(|text| text.starts_with(prefix))
    }
}

impl From<&str> for GroupKey {
    fn from(text: &str) -> Self {
        Self::Text(KeyText(ThinArc::from_header_and_slice((), text.as_bytes())))
    }
}

impl From<String> for GroupKey {
    fn from(text: String) -> Self {
        Self::from(text.as_str())
    }
}

impl From<WireName> for GroupKey {
    fn from(name: WireName) -> Self {
        Self::Name(name)
    }
}

impl fmt::Display for GroupKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Text(_) => f.write_str(self.text().unwrap_or_default()),
            Self::Name(name) => fmt::Display::fmt(name, f),
        }
    }
}

impl fmt::Debug for GroupKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::rr::Name;

    #[test]
    fn text_keys_order_as_their_text_and_match_prefixes() {
        let mut keys: Vec<GroupKey> = ["pod/1/a", "endpoints/0", "pod/0/b", "pod/0/a"]
            .into_iter()
            .map(GroupKey::from)
            .collect();
        keys.sort();
        let texts: Vec<String> = keys.iter().map(ToString::to_string).collect();
        assert_eq!(texts, ["endpoints/0", "pod/0/a", "pod/0/b", "pod/1/a"]);
        assert!(keys[1].starts_with("pod/0/"));
        assert!(!keys[3].starts_with("pod/0/"));
    }

    #[test]
    fn a_names_key_is_the_name_and_no_text_key() {
        let name = WireName::from_name(&Name::from_ascii("Web.Example.").unwrap());
        let key = GroupKey::from(name.clone());
        assert_eq!(key, GroupKey::Name(name));
        assert_eq!(key.to_string(), "web.example.");
        assert_ne!(key, GroupKey::from("web.example."));
        assert!(!key.starts_with("web"));
        assert_eq!(size_of::<GroupKey>(), 16);
    }
}
