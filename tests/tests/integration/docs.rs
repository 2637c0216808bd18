//! The documentation, checked without building the book: the generated reference pages are what
//! the agent's types give now, every relative link (and its `#anchor`) in the README, the
//! architecture notes, deploy/ and the book leads somewhere, and the book lists every page.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
};

use hostport_dns_tests::workspace_root;

/// The book's sources.
fn book() -> PathBuf {
    workspace_root().join("docs/src")
}

#[test]
fn the_generated_reference_pages_are_what_the_agents_types_give() {
    for (name, expected) in hostport_dns::reference::pages() {
        let path = book().join("reference").join(name);
        let found = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            found == expected,
            "{} is stale: run `cargo xtask docs` (first difference at line {})",
            path.display(),
            first_difference(&found, &expected)
        );
    }
}

fn first_difference(a: &str, b: &str) -> usize {
    a.lines()
        .zip(b.lines())
        .position(|(x, y)| x != y)
        .unwrap_or_else(|| a.lines().count().min(b.lines().count()))
        + 1
}

#[test]
fn every_relative_link_in_the_docs_leads_to_a_file_and_heading_that_exist() {
    let root = workspace_root();
    let mut files = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    files.extend(markdown_under(&root.join("deploy")));
    files.extend(markdown_under(&book()));
    files.push(root.join("tests/data/README.md"));
    let mut broken = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
        for target in links(&text) {
            if let Err(why) = check_link(file, &target) {
                broken.push(format!(
                    "{}: ({target}): {why}",
                    file.strip_prefix(&root).unwrap_or(file).display()
                ));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_book_lists_every_page_it_holds() {
    let summary = std::fs::read_to_string(book().join("SUMMARY.md")).expect("SUMMARY.md");
    let listed: BTreeSet<String> = links(&summary)
        .into_iter()
        .map(|l| l.split('#').next().unwrap_or_default().to_owned())
        .collect();
    for page in markdown_under(&book()) {
        let relative = page
            .strip_prefix(book())
            .expect("under the book")
            .to_string_lossy()
            .into_owned();
        if relative != "SUMMARY.md" {
            assert!(
                listed.contains(&relative),
                "{relative} is not in SUMMARY.md"
            );
        }
    }
}

#[test]
fn the_link_checker_finds_what_is_broken() {
    let text = "[a](missing.md) `[b](inline.md)` [c](https://example.org) [d](#here)\n\
                ```\n[e](in-a-block.md)\n```\n## Here it is\n";
    assert_eq!(links(text), ["missing.md", "#here"]);
    assert_eq!(
        anchors("## Here it is\n## `x.y` (z)\n## Here it is\n"),
        ["here-it-is", "here-it-is-1", "xy-z"]
            .into_iter()
            .map(String::from)
            .collect::<BTreeSet<_>>()
    );
}

/// Every `.md` file below `dir`.
fn markdown_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(markdown_under(&path));
        } else if path.extension().is_some_and(|e| e == "md") {
            found.push(path);
        }
    }
    found.sort();
    found
}

/// The relative targets of a page's Markdown links, outside code.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let outside_code: String = line
            .split('`')
            .enumerate()
            .filter(|(i, _)| i % 2 == 0)
            .map(|(_, part)| part)
            .collect::<Vec<_>>()
            .join(" ");
        let mut rest = outside_code.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let Some(end) = rest.find(')') else { break };
            let target = rest[..end].split_whitespace().next().unwrap_or_default();
            if !target.is_empty() && !target.contains("://") && !target.starts_with("mailto:") {
                out.push(target.to_owned());
            }
            rest = &rest[end..];
        }
    }
    out
}

/// Whether a link from `file` to `target` (`path`, `path#anchor` or `#anchor`) resolves.
fn check_link(file: &Path, target: &str) -> Result<(), String> {
    let (path, anchor) = match target.split_once('#') {
        Some((path, anchor)) => (path, Some(anchor)),
        None => (target, None),
    };
    let resolved = if path.is_empty() {
        file.to_path_buf()
    } else {
        file.parent().unwrap_or(Path::new(".")).join(path)
    };
    if !resolved.exists() {
        return Err("no such file".into());
    }
    let Some(anchor) = anchor else { return Ok(()) };
    if resolved.extension().is_none_or(|e| e != "md") {
        return Ok(());
    }
    let text = std::fs::read_to_string(&resolved).map_err(|e| e.to_string())?;
    if anchors(&text).contains(anchor) || text.contains(&format!("id=\"{anchor}\"")) {
        Ok(())
    } else {
        Err(format!("no heading #{anchor} in {}", resolved.display()))
    }
}

/// The anchors of a page's headings, as GitHub and mdBook make them: lower case, spaces to
/// `-`, other punctuation dropped, a repeated heading numbered.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let heading = line.trim_start_matches('#').trim();
        let base: String = heading
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let mut anchor = base.clone();
        let mut n = 0;
        while out.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        out.insert(anchor);
    }
    out
}
