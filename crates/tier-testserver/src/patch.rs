//! PATCH bodies: JSON merge patch (RFC 7386) and JSON patch (RFC 6902), the two patch types
//! kube-apiserver accepts for custom resources besides server-side apply.

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

/// Applies an RFC 6902 JSON patch (an array of operations) to a copy of `target`.
///
/// `Err` describes the first operation that could not be applied.
pub(crate) fn json_patch(target: &Value, ops: &Value) -> Result<Value, String> {
    let ops = ops
        .as_array()
        .ok_or_else(|| "a JSON patch must be an array of operations".to_owned())?;
    let mut doc = target.clone();
    for (i, op) in ops.iter().enumerate() {
        apply_op(&mut doc, op).map_err(|e| format!("operation {i}: {e}"))?;
    }
    Ok(doc)
}

fn apply_op(doc: &mut Value, op: &Value) -> Result<(), String> {
    let kind = op
        .get("op")
        .and_then(Value::as_str)
        .ok_or("missing \"op\"")?;
    let path = op
        .get("path")
        .and_then(Value::as_str)
        .ok_or("missing \"path\"")?;
    let value = || op.get("value").cloned().ok_or("missing \"value\"");
    let from = || {
        op.get("from")
            .and_then(Value::as_str)
            .ok_or("missing \"from\"")
    };
    match kind {
        "add" => add(doc, path, value()?),
        "remove" => remove(doc, path).map(drop),
        "replace" => {
            remove(doc, path)?;
            add(doc, path, value()?)
        }
        "move" => {
            let moved = remove(doc, from()?)?;
            add(doc, path, moved)
        }
        "copy" => {
            let copied = doc
                .pointer(from()?)
                .cloned()
                .ok_or_else(|| format!("path {:?} not found", from().unwrap_or_default()))?;
            add(doc, path, copied)
        }
        "test" => {
            if doc.pointer(path) == Some(&value()?) {
                Ok(())
            } else {
                Err(format!("test failed at {path:?}"))
            }
        }
        other => Err(format!("unknown op {other:?}")),
    }
}

/// Splits a JSON pointer into its parent pointer and unescaped last token.
fn split_pointer(path: &str) -> Result<(&str, String), String> {
    if path.is_empty() {
        return Err("the whole document cannot be replaced".into());
    }
    let idx = path
        .rfind('/')
        .ok_or_else(|| format!("invalid pointer {path:?}"))?;
    let token = path[idx + 1..].replace("~1", "/").replace("~0", "~");
    Ok((&path[..idx], token))
}

fn add(doc: &mut Value, path: &str, value: Value) -> Result<(), String> {
    let (parent, token) = split_pointer(path)?;
    match doc.pointer_mut(parent) {
        Some(Value::Object(map)) => {
            map.insert(token, value);
            Ok(())
        }
        Some(Value::Array(items)) => {
            let index = if token == "-" {
                items.len()
            } else {
                token
                    .parse::<usize>()
                    .ok()
                    .filter(|i| *i <= items.len())
                    .ok_or_else(|| format!("invalid array index {token:?}"))?
            };
            items.insert(index, value);
            Ok(())
        }
        _ => Err(format!("path {parent:?} not found")),
    }
}

fn remove(doc: &mut Value, path: &str) -> Result<Value, String> {
    let (parent, token) = split_pointer(path)?;
    match doc.pointer_mut(parent) {
        Some(Value::Object(map)) => map
            .remove(&token)
            .ok_or_else(|| format!("path {path:?} not found")),
        Some(Value::Array(items)) => {
            let index = token
                .parse::<usize>()
                .ok()
                .filter(|i| *i < items.len())
                .ok_or_else(|| format!("invalid array index {token:?}"))?;
            Ok(items.remove(index))
        }
        _ => Err(format!("path {parent:?} not found")),
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

    #[test]
    fn json_patch_operations() {
        let doc =
            json!({"spec": {"priority": 1}, "metadata": {"labels": {"a/b": "x"}}, "l": [1, 2]});
        let out = json_patch(
            &doc,
            &json!([
                {"op": "test", "path": "/spec/priority", "value": 1},
                {"op": "replace", "path": "/spec/priority", "value": 5},
                {"op": "add", "path": "/spec/description", "value": "d"},
                {"op": "remove", "path": "/metadata/labels/a~1b"},
                {"op": "add", "path": "/l/-", "value": 3},
                {"op": "copy", "from": "/spec/priority", "path": "/l/0"},
                {"op": "move", "from": "/spec/description", "path": "/d"},
            ]),
        )
        .unwrap();
        assert_eq!(
            out,
            json!({"spec": {"priority": 5}, "metadata": {"labels": {}}, "l": [5, 1, 2, 3], "d": "d"})
        );
        assert!(
            json_patch(
                &doc,
                &json!([{"op": "test", "path": "/spec/priority", "value": 2}])
            )
            .is_err()
        );
        assert!(json_patch(&doc, &json!([{"op": "remove", "path": "/nope"}])).is_err());
        assert!(json_patch(&doc, &json!({"op": "add"})).is_err());
    }
}
