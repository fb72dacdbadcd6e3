//! PATCH bodies: JSON merge patch (RFC 7386), what kube clients send for Tiers and Events.
//! JSON patch (RFC 6902) and server-side apply are refused (415): nothing here sends them.

use serde_json::{Map, Value};

/// Applies an RFC 7386 merge patch to `target` in place.
pub(crate) fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch_map) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(target_map) = target {
        for (key, value) in patch_map {
            if value.is_null() {
                target_map.remove(key);
            } else {
                merge_patch(target_map.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn merge_patch_follows_rfc7386() {
        let mut doc = json!({"a": "b", "c": {"d": "e", "f": "g"}, "l": [1]});
        merge_patch(
            &mut doc,
            &json!({"a": "z", "c": {"f": null}, "l": [2], "n": {"x": 1}}),
        );
        assert_eq!(
            doc,
            json!({"a": "z", "c": {"d": "e"}, "l": [2], "n": {"x": 1}})
        );
    }
}
