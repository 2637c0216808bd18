//! The metrics exposition in the Prometheus text format (version 0.0.4), for clients that do not
//! ask for OpenMetrics: curl, promtool, older scrapers. The registry encodes OpenMetrics; the two
//! formats differ in what this rewrites: a counter family is named after its `_total` series in
//! the classic format, and `# UNIT` and `# EOF` lines do not exist there.

/// Content type of [`classic`]'s output.
pub const CLASSIC_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Content type of the registry's own encoding.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Whether an `Accept` header asks for OpenMetrics (Prometheus's scrapes do).
pub fn wants_openmetrics(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| a.contains("application/openmetrics-text"))
}

/// The OpenMetrics text `openmetrics` in the classic format.
pub fn classic(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    // The HELP line comes before the TYPE line that says whether the family is a counter.
    let mut help: Option<(&str, &str)> = None;
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            flush_help(&mut out, help.take(), None);
            help = rest.split_once(' ').or(Some((rest, "")));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let name = if kind == "counter" {
                format!("{name}_total")
            } else {
                name.to_owned()
            };
            let kind = match kind {
                "counter" | "gauge" | "histogram" | "summary" => kind,
                _ => "untyped",
            };
            flush_help(&mut out, help.take(), Some(&name));
            out.push_str(&format!("# TYPE {name} {kind}\n"));
            continue;
        }
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        flush_help(&mut out, help.take(), None);
        out.push_str(line);
        out.push('\n');
    }
    flush_help(&mut out, help, None);
    out
}

/// Writes a pending HELP line, under `name` if given (the family's classic name).
fn flush_help(out: &mut String, help: Option<(&str, &str)>, name: Option<&str>) {
    if let Some((own, text)) = help {
        out.push_str(&format!("# HELP {} {text}\n", name.unwrap_or(own)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_named_after_their_series_and_openmetrics_only_lines_go() {
        let openmetrics = "# HELP hpd_responses Answers sent.\n# TYPE hpd_responses counter\nhpd_responses_total{path=\"xdp\"} 3\n# HELP hpd_names Names.\n# TYPE hpd_names gauge\n# UNIT hpd_names names\nhpd_names 4\n# HELP hpd_seconds Latency.\n# TYPE hpd_seconds histogram\nhpd_seconds_bucket{le=\"+Inf\"} 1\nhpd_seconds_sum 0.5\nhpd_seconds_count 1\n# HELP hpd_build_info Build.\n# TYPE hpd_build_info info\nhpd_build_info{version=\"1\"} 1\n# EOF\n";
        assert_eq!(
            classic(openmetrics),
            "# HELP hpd_responses_total Answers sent.\n# TYPE hpd_responses_total counter\nhpd_responses_total{path=\"xdp\"} 3\n# HELP hpd_names Names.\n# TYPE hpd_names gauge\nhpd_names 4\n# HELP hpd_seconds Latency.\n# TYPE hpd_seconds histogram\nhpd_seconds_bucket{le=\"+Inf\"} 1\nhpd_seconds_sum 0.5\nhpd_seconds_count 1\n# HELP hpd_build_info Build.\n# TYPE hpd_build_info untyped\nhpd_build_info{version=\"1\"} 1\n"
        );
    }

    #[test]
    fn prometheus_scrapes_get_openmetrics() {
        assert!(wants_openmetrics(Some(
            "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
        )));
        assert!(!wants_openmetrics(Some("*/*")));
        assert!(!wants_openmetrics(None));
    }
}
