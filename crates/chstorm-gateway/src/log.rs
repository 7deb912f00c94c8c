//! JSON log lines on stderr: one object per line, with the query_id where there is one, and
//! never a password.

use serde_json::{json, Value};

/// Writes one JSON log line: `{"ts": ..., "level": ..., "msg": ..., ...fields}`.
pub fn log(level: &str, msg: &str, fields: Value) {
    let mut obj = json!({
        "ts": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "level": level,
        "msg": msg,
    });
    if let (Some(o), Value::Object(f)) = (obj.as_object_mut(), fields) {
        o.extend(f);
    }
    eprintln!("{obj}");
}
