//! The real client queries and Knot DNS's answers in `tests/data/client-queries.hex` (where they
//! came from: `tests/data/README.md`).

/// One captured exchange: the client's query and, where captured, Knot's answer.
#[derive(Clone, Debug)]
pub struct Capture {
    /// The section heading the query came under (which client).
    pub client: String,
    pub query: Vec<u8>,
    pub knot_answer: Option<Vec<u8>>,
}

/// The zone Knot served when the captures were made (`tests/data/prod.coreha.example.zone`,
/// written by hand), as a record file.
pub const CAPTURE_ZONE: &str = "zones:
  - name: prod.coreha.example
    ttl: 5
    records:
      default-nginx.ingress: [198.18.200.1, 198.18.200.2, 198.18.200.3]
      svc1.ns1: [198.18.101.5, 198.18.101.6, 198.18.101.7]
      v6.ns1: [\"2001:db8::5\", \"2001:db8::6\"]
";

impl Capture {
    /// Whether the query was sent over IPv6 (its heading says so).
    pub fn over_ipv6(&self) -> bool {
        self.client.contains("IPv6")
    }
}

/// Reads every capture. Panics if the file is missing: the tests depend on it.
pub fn client_queries() -> Vec<Capture> {
    let path = crate::workspace_root().join("tests/data/client-queries.hex");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    parse(&text)
}

fn parse(text: &str) -> Vec<Capture> {
    let mut captures: Vec<Capture> = Vec::new();
    let mut client = String::new();
    for line in text.lines() {
        if let Some(heading) = line.strip_prefix("## ") {
            client = heading.trim().to_owned();
            continue;
        }
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (direction, hex) = match line.split_once('\t') {
            Some((d, h)) => (d.trim(), h.trim()),
            // A line without a direction holds a query.
            None => ("0", line.trim()),
        };
        let bytes = decode_hex(hex);
        match direction {
            "1" => {
                if let Some(last) = captures.last_mut() {
                    last.knot_answer = Some(bytes);
                }
            }
            _ => captures.push(Capture {
                client: client.clone(),
                query: bytes,
                knot_answer: None,
            }),
        }
    }
    captures
}

fn decode_hex(hex: &str) -> Vec<u8> {
    (0..hex.len() / 2)
        .filter_map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_captures_hold_queries_and_answers() {
        let captures = super::client_queries();
        assert!(captures.len() >= 14, "{captures:?}");
        assert!(captures.iter().filter(|c| c.knot_answer.is_some()).count() >= 10);
        assert!(captures.iter().any(|c| c.over_ipv6()));
        for capture in &captures {
            assert!(capture.query.len() > 12);
        }
    }
}
