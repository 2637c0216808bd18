//! `cargo xtask schema`: the chart's values schema embeds the agent's own configuration schema
//! (`hostport-dns config-schema`), so that what the chart accepts is what the agent accepts.
//!
//! The generated definitions replace the values schema's `definitions` entirely, and every
//! values section that the chart copies into the configuration file unchanged refers to them
//! (`SECTIONS`). Chart-only values keep their hand-written schemas. A deploy test fails when the
//! embedded definitions differ from the agent's.

use std::process::Command;

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::cmd;

/// The chart's values schema, relative to the workspace root.
pub const VALUES_SCHEMA: &str = "deploy/chart/hostport-dns/values.schema.json";

/// Values sections the chart's ConfigMap copies into the configuration file as they are: the
/// JSON pointer of each in the values schema, and the definition (or the place in one) of the
/// configuration file's schema it is.
fn sections() -> Vec<(&'static str, Value)> {
    let array_of = |definition: &str| json!({ "type": "array", "items": { "$ref": format!("#/definitions/{definition}") } });
    let reference = |path: &str| json!({ "$ref": format!("#/definitions/{path}") });
    vec![
        // The chart needs a zone (its default sources name one); the agent does not.
        (
            "/properties/zones",
            json!({ "type": "array", "minItems": 1, "items": { "$ref": "#/definitions/ZoneEntry" } }),
        ),
        ("/properties/pods", array_of("PodEntry")),
        ("/properties/endpointSlices", array_of("EndpointSliceEntry")),
        ("/properties/reverseZones", reference("ReverseZonesEntry")),
        ("/properties/nodes", reference("NodesEntry")),
        (
            "/properties/clients/properties/allow",
            reference("ClientsEntry/properties/allow"),
        ),
        (
            "/properties/clients/properties/outside",
            reference("Outside"),
        ),
        (
            "/properties/clients/properties/rateLimit",
            reference("RateLimitEntry"),
        ),
        (
            "/properties/clients/properties/cookies/properties/enabled",
            reference("CookieConfig/properties/enabled"),
        ),
        (
            "/properties/transfer/properties/keys/items/properties/name",
            reference("KeyName"),
        ),
        (
            "/properties/transfer/properties/keys/items/properties/algorithm",
            reference("TsigAlgorithmName"),
        ),
        (
            "/properties/transfer/properties/allow",
            array_of("AllowItem"),
        ),
        (
            "/properties/transfer/properties/notify",
            array_of("NotifyItem"),
        ),
        (
            "/properties/transfer/properties/history",
            reference("TransferEntry/properties/history"),
        ),
        (
            "/properties/transfer/properties/catalog",
            reference("TransferEntry/properties/catalog"),
        ),
        (
            "/properties/leaderElection/properties/leaseName",
            reference("LeaderElectionEntry/properties/leaseName"),
        ),
        (
            "/properties/update/properties/targets",
            array_of("UpdateEntry"),
        ),
        (
            "/properties/externalDns/properties/outputs",
            array_of("ExternalDnsOutputEntry"),
        ),
        (
            "/properties/apiServer/properties/fallbacks",
            reference("KubernetesAccess/properties/fallbackApiServers"),
        ),
        (
            "/properties/apiServer/properties/learnFromEndpointSlices",
            reference("KubernetesAccess/properties/learnApiServers"),
        ),
    ]
}

/// Regenerates the values schema from the agent built from this tree.
pub fn run() -> anyhow::Result<()> {
    let agent = cmd::build_agent()?;
    let generated = cmd::output(Command::new(&agent).arg("config-schema"))?;
    let generated: Value =
        serde_json::from_str(&generated).context("`hostport-dns config-schema` output")?;
    let path = cmd::workspace_root().join(VALUES_SCHEMA);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))?;
    let mut values: Value =
        serde_json::from_str(&text).with_context(|| format!("parse {}", path.display()))?;
    embed(&mut values, &generated)?;
    let text = serde_json::to_string_pretty(&values)? + "\n";
    std::fs::write(&path, text).with_context(|| format!("write {}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
}

/// The generated definitions into `values`, and the sections pointed at them.
fn embed(values: &mut Value, generated: &Value) -> anyhow::Result<()> {
    let Some(definitions) = generated.get("definitions") else {
        bail!("the configuration schema has no definitions (not draft-07?)");
    };
    let Some(root) = values.as_object_mut() else {
        bail!("{VALUES_SCHEMA} is not a JSON object");
    };
    root.insert("definitions".into(), definitions.clone());
    for (pointer, schema) in sections() {
        if let Some(target) = schema["$ref"].as_str() {
            let path = target.trim_start_matches('#');
            if generated.pointer(path).is_none() {
                bail!("{pointer}: the configuration schema has no {target}");
            }
        }
        let Some(slot) = values.pointer_mut(pointer) else {
            bail!("{VALUES_SCHEMA} has no {pointer}: write its hand-written part first");
        };
        *slot = schema;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedding_replaces_the_definitions_and_points_the_sections_at_them() {
        let mut values = json!({});
        for (pointer, _) in sections() {
            // Build the skeleton each pointer needs.
            let mut at = &mut values;
            for part in pointer.trim_start_matches('/').split('/') {
                at = at
                    .as_object_mut()
                    .expect("an object")
                    .entry(part)
                    .or_insert_with(|| json!({}));
            }
        }
        values["definitions"] = json!({ "old": {} });
        let generated = json!({ "definitions": {
            "ZoneEntry": {}, "PodEntry": {}, "NodesEntry": {}, "EndpointSliceEntry": {}, "ReverseZonesEntry": {},
            "ClientsEntry": { "properties": { "allow": {} } }, "Outside": {}, "RateLimitEntry": {},
            "CookieConfig": { "properties": { "enabled": {} } }, "KeyName": {},
            "TsigAlgorithmName": {}, "AllowItem": {}, "NotifyItem": {},
            "TransferEntry": { "properties": { "history": {}, "catalog": {} } },
            "LeaderElectionEntry": { "properties": { "leaseName": {} } }, "ExternalDnsOutputEntry": {},
            "UpdateEntry": {},
            "KubernetesAccess": { "properties": { "fallbackApiServers": {}, "learnApiServers": {} } },
        } });
        embed(&mut values, &generated).expect("embeds");
        assert_eq!(values["definitions"], generated["definitions"]);
        assert_eq!(
            values["properties"]["pods"]["items"]["$ref"],
            "#/definitions/PodEntry"
        );
        let mut missing = values.clone();
        let broken = json!({ "definitions": { "ZoneEntry": {} } });
        assert!(
            embed(&mut missing, &broken).is_err(),
            "a missing target is an error"
        );
    }
}
