//! `vaultgate describe`: the machine contract — tools with schemas and annotations, tiers, codes.

use policy::{Capability, ErrorCode, TOOLS, Tier};
use serde_json::{Value, json};

use crate::tools::CATALOG;

pub fn describe() -> Value {
    let tools: Vec<Value> = CATALOG
        .iter()
        .map(|t| {
            let mut v = serde_json::to_value(t).unwrap_or(Value::Null);
            if let (Some(o), Some(spec)) = (v.as_object_mut(), TOOLS.iter().find(|s| s.name == t.name)) {
                o.insert("tiers".into(), json!(tiers_allowing(spec.capability())));
            }
            v
        })
        .collect();
    let caps = [
        ("read", Capability::Read),
        ("propose", Capability::Propose),
        ("decideOwn", Capability::DecideOwn),
        ("decideAny", Capability::DecideAny),
        ("history", Capability::History),
        ("critical", Capability::Critical),
    ];
    let tiers: Vec<Value> = Tier::ALL
        .iter()
        .map(|t| {
            let allowed: Vec<&str> = caps
                .iter()
                .filter(|(_, c)| t.allows(*c))
                .map(|(n, _)| *n)
                .collect();
            json!({ "tier": t.as_str(), "capabilities": allowed })
        })
        .collect();
    let codes: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
    let errors: Vec<Value> = ErrorCode::ALL
        .iter()
        .map(|c| json!({ "code": c.as_str(), "retryable": c.retryable(), "meaning": c.meaning(), "next": c.next_step() }))
        .collect();
    json!({
        "name": "vaultgate",
        "version": env!("CARGO_PKG_VERSION"),
        // The Unicode version of the path rules (which code points are unassigned) and of what
        // people see escaped.
        "unicodeVersion": policy::text::UNICODE_VERSION,
        "tools": tools,
        "tiers": tiers,
        "errorCodes": codes,
        "errors": errors,
    })
}

fn tiers_allowing(cap: Capability) -> Vec<&'static str> {
    Tier::ALL
        .iter()
        .filter(|t| t.allows(cap))
        .map(|t| t.as_str())
        .collect()
}

pub fn human(d: &Value) -> String {
    let mut s = format!(
        "vaultgate {} (Unicode {})\n\nTools:\n",
        d["version"].as_str().unwrap_or(""),
        d["unicodeVersion"].as_str().unwrap_or("")
    );
    for t in d["tools"].as_array().into_iter().flatten() {
        let tiers: Vec<&str> = t["tiers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        s.push_str(&format!(
            "  {:<22} [{}] {}\n",
            t["name"].as_str().unwrap_or(""),
            tiers.join(","),
            t["description"].as_str().unwrap_or("")
        ));
    }
    s.push_str("\nTiers:\n");
    for t in d["tiers"].as_array().into_iter().flatten() {
        let caps: Vec<&str> = t["capabilities"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        s.push_str(&format!(
            "  {:<8} {}\n",
            t["tier"].as_str().unwrap_or(""),
            caps.join(", ")
        ));
    }
    s.push_str("\nError codes: ");
    let codes: Vec<&str> = d["errorCodes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    s.push_str(&codes.join(", "));
    s
}
