//! Validating records, requests, replies and verdicts against audit-schema/.
//!
//! The schemas are compiled once per test binary (`OnceLock`). Every helper
//! panics with every validation error it finds, so a failing test names the
//! field that broke the contract.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use jsonschema::error::ValidationErrorKind;
use jsonschema::{ValidationError, Validator};
use serde_json::Value;

/// `audit-schema/` in this checkout.
pub fn schema_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("audit-schema")
}

/// Loads and compiles `audit-schema/NAME.schema.json` (draft 2020-12, with
/// `format` asserted, so `ts` must be a real RFC 3339 date-time).
pub fn compile(name: &str) -> Validator {
    let path = schema_dir().join(format!("{name}.schema.json"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let schema: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
    jsonschema::draft202012::options()
        .should_validate_formats(true)
        .build(&schema)
        .unwrap_or_else(|e| {
            panic!(
                "{} is not a valid draft 2020-12 schema: {e}",
                path.display()
            )
        })
}

fn cached(cell: &'static OnceLock<Validator>, name: &str) -> &'static Validator {
    cell.get_or_init(|| compile(name))
}

pub fn record_validator() -> &'static Validator {
    static V: OnceLock<Validator> = OnceLock::new();
    cached(&V, "record")
}

pub fn request_validator() -> &'static Validator {
    static V: OnceLock<Validator> = OnceLock::new();
    cached(&V, "request")
}

pub fn reply_validator() -> &'static Validator {
    static V: OnceLock<Validator> = OnceLock::new();
    cached(&V, "reply")
}

pub fn show_validator() -> &'static Validator {
    static V: OnceLock<Validator> = OnceLock::new();
    cached(&V, "show")
}

pub fn exec_status_validator() -> &'static Validator {
    static V: OnceLock<Validator> = OnceLock::new();
    cached(&V, "exec-status")
}

pub fn verdict_validator() -> &'static Validator {
    static V: OnceLock<Validator> = OnceLock::new();
    cached(&V, "verdict")
}

/// Every error for `instance`, one per line. For a `oneOf` that no variant
/// matched, the variants rejected only by their discriminator (`kind`,
/// `type`) are left out, so what is printed is why the intended variant failed.
pub fn schema_errors(validator: &Validator, instance: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for e in validator.iter_errors(instance) {
        describe(&e, 0, &mut out);
    }
    out
}

fn describe(e: &ValidationError<'_>, depth: usize, out: &mut Vec<String>) {
    let indent = "    ".repeat(depth);
    let at = e.instance_path().as_str();
    let at = if at.is_empty() { "/" } else { at };
    out.push(format!(
        "{indent}at {at} (schema {}): {}",
        e.schema_path().as_str(),
        e.masked()
    ));
    if let ValidationErrorKind::OneOfNotValid { context } | ValidationErrorKind::AnyOf { context } =
        e.kind()
    {
        let relevant: Vec<&Vec<ValidationError<'static>>> = context
            .iter()
            .filter(|branch| !branch.iter().any(is_discriminator_miss))
            .collect();
        let shown: Vec<&Vec<ValidationError<'static>>> = if relevant.is_empty() {
            context.iter().collect()
        } else {
            relevant
        };
        for (i, branch) in shown.iter().enumerate() {
            if shown.len() > 1 {
                out.push(format!("{indent}  variant {}:", i + 1));
            }
            for sub in branch.iter() {
                describe(sub, depth + 1, out);
            }
        }
    }
}

/// A `const` mismatch on a top-level `kind` or `type` key: that variant was
/// not the one meant.
fn is_discriminator_miss(e: &ValidationError<'_>) -> bool {
    matches!(e.kind(), ValidationErrorKind::Constant { .. })
        && matches!(e.instance_path().as_str(), "/kind" | "/type")
}

/// Panics naming `what` and every error if `instance` does not validate.
pub fn assert_valid(validator: &Validator, instance: &Value, what: &str) {
    let errors = schema_errors(validator, instance);
    if !errors.is_empty() {
        panic!(
            "{what} does not match the schema ({} error(s)):\n{}\ninstance: {instance}",
            errors.len(),
            errors.join("\n")
        );
    }
}

/// Validates every complete line of the audit log at `path` against
/// `audit-schema/record.schema.json`. A torn tail (bytes after the last
/// `\n`) is not a record and is not checked. Panics listing every failing
/// line by its 1-based number with all of its errors.
pub fn assert_log_matches_schema(path: &Path) {
    let bytes =
        std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let validator = record_validator();
    let mut failures = Vec::new();
    let mut complete = 0usize;
    for (i, line) in bytes.split_inclusive(|&b| b == b'\n').enumerate() {
        let Some(line) = line.strip_suffix(b"\n") else {
            break; // torn tail
        };
        complete += 1;
        let n = i + 1;
        let text = match std::str::from_utf8(line) {
            Ok(t) => t,
            Err(e) => {
                failures.push(format!("line {n}: not UTF-8: {e}"));
                continue;
            }
        };
        let value: Value = match serde_json::from_str(text) {
            Ok(v) => v,
            Err(e) => {
                failures.push(format!("line {n}: not JSON: {e}\n  {text}"));
                continue;
            }
        };
        let errors = schema_errors(validator, &value);
        if !errors.is_empty() {
            failures.push(format!(
                "line {n}: {} error(s):\n  {}\n  line: {text}",
                errors.len(),
                errors.join("\n  ")
            ));
        }
    }
    if !failures.is_empty() {
        panic!(
            "{}: {} of {complete} record line(s) do not match audit-schema/record.schema.json:\n{}",
            path.display(),
            failures.len(),
            failures.join("\n")
        );
    }
}

fn parse_line(line: &str, what: &str) -> Value {
    let line = line.strip_suffix('\n').unwrap_or(line);
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{what} is not JSON: {e}: {line}"))
}

/// One request line (with or without its `\n`) against request.schema.json.
pub fn assert_request_matches_schema(line: &str) {
    assert_valid(request_validator(), &parse_line(line, "request"), "request");
}

/// One reply line (with or without its `\n`) against reply.schema.json.
pub fn assert_reply_matches_schema(line: &str) {
    assert_valid(reply_validator(), &parse_line(line, "reply"), "reply");
}

/// A `rea-audit verify --json` object against verdict.schema.json.
pub fn assert_verdict_matches_schema(v: &Value) {
    assert_valid(verdict_validator(), v, "verdict");
}
