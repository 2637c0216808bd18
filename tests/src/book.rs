//! The operator's book (`docs/src`) as the tests read it: the configuration a page shows is the
//! configuration a test runs, so a snippet cannot drift from what works.

use crate::workspace_root;

/// The bodies of the fenced code blocks in the section of `page` (a file under `docs/src`)
/// headed `heading` (the heading's whole text, with its `#`s), up to the next heading of the
/// same or a higher level; in page order.
pub fn blocks(page: &str, heading: &str) -> Vec<String> {
    let path = workspace_root().join("docs/src").join(page);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let level = heading.chars().take_while(|c| *c == '#').count();
    assert!(level > 0, "{heading:?} is not a heading");
    let mut lines = text.lines().skip_while(|l| l.trim_end() != heading);
    assert!(lines.next().is_some(), "{page} has no heading {heading:?}");
    let mut blocks = Vec::new();
    let mut open: Option<String> = None;
    for line in lines {
        if line.starts_with("```") {
            match open.take() {
                Some(body) => blocks.push(body),
                None => open = Some(String::new()),
            }
            continue;
        }
        match &mut open {
            Some(body) => {
                body.push_str(line);
                body.push('\n');
            }
            None if heading_level(line).is_some_and(|l| l <= level) => break,
            None => {}
        }
    }
    assert!(
        open.is_none(),
        "{page}: a code block under {heading:?} is not closed"
    );
    blocks
}

/// The level of a Markdown heading line (`## x` is 2).
fn heading_level(line: &str) -> Option<usize> {
    let level = line.chars().take_while(|c| *c == '#').count();
    (level > 0 && line[level..].starts_with(' ')).then_some(level)
}

/// `snippet` with each `(from, to)` replaced, in order: the book's example addresses
/// (192.0.2.0/24, RFC 5737), names and placeholders made the test's. Panics when an example
/// address or a `<placeholder>` is left outside a `#` comment, as the test would then run
/// something else than it says.
pub fn made_local(snippet: &str, replacements: &[(&str, &str)]) -> String {
    let local = replacements
        .iter()
        .fold(snippet.to_owned(), |text, (from, to)| {
            text.replace(from, to)
        });
    let left = local.lines().find(|line| {
        let setting = line.split_once('#').map_or(*line, |(before, _)| before);
        setting.contains("192.0.2.") || setting.contains('<')
    });
    assert!(
        left.is_none(),
        "the book names something this test does not stand in for ({left:?}):\n{local}"
    );
    local
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headings_are_told_by_their_hashes_and_a_space() {
        assert_eq!(heading_level("## HAProxy"), Some(2));
        assert_eq!(heading_level("### a"), Some(3));
        assert_eq!(heading_level("#!/bin/sh"), None);
        assert_eq!(heading_level("text"), None);
    }

    #[test]
    fn a_leftover_example_address_is_refused() {
        let local = made_local(
            "nameserver cp1 192.0.2.11:1053\n",
            &[("192.0.2.11", "127.0.0.1")],
        );
        assert_eq!(local, "nameserver cp1 127.0.0.1:1053\n");
        let left = std::panic::catch_unwind(|| made_local("a 192.0.2.12\n", &[]));
        assert!(left.is_err());
        let placeholder = std::panic::catch_unwind(|| made_local("secret \"<base64>\"\n", &[]));
        assert!(placeholder.is_err());
        assert_eq!(
            made_local("a: 1  # <relative>\n", &[]),
            "a: 1  # <relative>\n"
        );
    }
}
