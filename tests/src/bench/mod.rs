//! Benchmarks: figures and ratios against peers run side by side in the same run, never
//! assertions. `cargo xtask bench <what>` runs them.

pub mod churn;
pub mod flood;
pub mod kernel;
pub mod load;
pub mod memory;
pub mod propagation;
pub mod responders;
pub mod soak;
pub mod system;
pub mod transfer;

use std::fmt::Write as _;

/// A zone of `names` names with three A records each, as a record file, and the names.
pub fn zone(names: usize) -> (String, Vec<String>) {
    let mut text = String::from("zones:\n  - name: bench.example\n    ttl: 5\n    records:\n");
    let mut list = Vec::with_capacity(names);
    for i in 0..names {
        let name = format!("svc{i}.ns{}", i % 10);
        let _ = writeln!(
            text,
            "      {name}: [198.18.{}.{}, 198.18.{}.{}, 198.18.{}.{}]",
            100 + i / 250 % 100,
            i % 250 + 1,
            100 + i / 250 % 100,
            (i + 1) % 250 + 1,
            100 + i / 250 % 100,
            (i + 2) % 250 + 1
        );
        list.push(format!("{name}.bench.example"));
    }
    (text, list)
}

/// A query file for kxdpgun and dnsperf: one "name type" per line.
pub fn query_file(names: &[String], qtype: &str) -> String {
    names.iter().map(|n| format!("{n} {qtype}\n")).collect()
}

/// Prints a table with a header row.
pub fn print_table(title: &str, header: &[&str], rows: &[Vec<String>]) {
    println!("\n{title}");
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            rows.iter()
                .map(|r| r.get(i).map_or(0, String::len))
                .chain([header[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        println!("  {}", padded.join("  "));
    };
    line(header.to_vec());
    line(
        widths
            .iter()
            .map(|w| "-".repeat(*w))
            .collect::<Vec<_>>()
            .iter()
            .map(String::as_str)
            .collect(),
    );
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}
