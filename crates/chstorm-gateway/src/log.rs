//! JSON log lines on stderr: one object per line, with the query_id where there is one, and
//! never a password.
//!
//! A line is formatted whole and written with one `write` (stderr is unbuffered: formatting
//! straight into it wrote each token of the object with a call of its own, about 50 a line). A
//! failed write loses the line and nothing else: a log pipe whose reader has gone (a restarted
//! collector) does not stop the gateway.

use serde_json::{json, Value};
use std::io::Write;

/// Writes one JSON log line: `{"ts": ..., "level": ..., "msg": ..., ...fields}`.
pub fn log(level: &str, msg: &str, fields: Value) {
    let _ = std::io::stderr().lock().write_all(line(level, msg, fields).as_bytes());
}

/// The log line of [`log`], with its newline.
fn line(level: &str, msg: &str, fields: Value) -> String {
    let mut obj = json!({
        "ts": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "level": level,
        "msg": msg,
    });
    if let (Some(o), Value::Object(f)) = (obj.as_object_mut(), fields) {
        o.extend(f);
    }
    let mut line = obj.to_string();
    line.push('\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_one_json_object_with_its_fields_and_one_newline() {
        let text = "a \"quoted\"\nmessage";
        let l = line("warn", text, json!({"query_id": "q\n1", "n": 3}));
        assert!(l.ends_with('\n') && l.matches('\n').count() == 1, "{l:?}");
        let v: Value = serde_json::from_str(&l).unwrap();
        assert_eq!((v["level"].as_str(), v["msg"].as_str()), (Some("warn"), Some(text)));
        assert_eq!((v["query_id"].as_str(), v["n"].as_u64()), (Some("q\n1"), Some(3)));
        assert!(v["ts"].as_str().is_some_and(|t| t.ends_with('Z')));
    }
}
