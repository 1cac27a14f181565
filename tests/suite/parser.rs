//! The request parser (`rea::protocol::parse_request`): every shape error
//! has its own reason code, refusals keep the address they can, arrays are
//! never taken for objects. Pure: no process is started here.
//!
//! The properties at the end (proptest): arbitrary bytes never panic the
//! parser; a request the parser accepts, re-serialised through
//! `rea::protocol::Request`, parses to an equal value. Short mode by default
//! (64 cases a property); long mode: `REA_LONG_PROPTEST=1 tools/test
//! parser::` (20 000 cases a property).

use rea::protocol::{parse_request, Op, RefusalReason};
fn spawn_line(extra: &str) -> String {
    format!(
        r#"{{"v":1,"op":"spawn","id":"a1","caller":{{"pid":5,"start_time":7,"uid":0}},"reply":"r1","argv":["/bin/true"],"deadline_ms":1000,"capture":"discard"{extra}}}"#
    )
}

fn reason(line: &str) -> RefusalReason {
    parse_request(line.as_bytes()).unwrap_err().reason
}

#[test]
fn good_spawn_parses() {
    let r = parse_request(spawn_line(r#","name":"install""#).as_bytes()).unwrap();
    assert_eq!(r.op, Op::Spawn);
    assert_eq!(r.caller.pid, 5);
    let s = r.spawn.unwrap();
    assert_eq!(s.argv, vec!["/bin/true"]);
    assert_eq!(s.name.as_deref(), Some("install"));
}

#[test]
fn each_shape_error_has_its_reason() {
    assert_eq!(reason("not json"), RefusalReason::Malformed);
    assert_eq!(
        reason(&spawn_line(r#","x":1"#)),
        RefusalReason::UnknownField
    );
    assert_eq!(
        reason(&spawn_line(r#","id":"b""#)),
        RefusalReason::DuplicateKey
    );
    assert_eq!(
        reason(&spawn_line("").replace("\"a1\"", "\"a b\"")),
        RefusalReason::BadId
    );
    assert_eq!(
        reason(&spawn_line("").replace("\"r1\"", "\"../x\"")),
        RefusalReason::BadReply
    );
    assert_eq!(
        reason(&spawn_line("").replace("\"v\":1", "\"v\":2")),
        RefusalReason::BadVersion
    );
    assert_eq!(
        reason(&spawn_line("").replace("\"spawn\"", "\"run\"")),
        RefusalReason::BadOp
    );
    assert_eq!(
        reason(&spawn_line("").replace("[\"/bin/true\"]", "[]")),
        RefusalReason::BadArgv
    );
    assert_eq!(
        reason(&spawn_line("").replace("/bin/true", "true")),
        RefusalReason::RelativeArgv0
    );
    assert_eq!(
        reason(&spawn_line("").replace(":1000", ":0")),
        RefusalReason::BadDeadline
    );
    assert_eq!(
        reason(&spawn_line("").replace(":1000", ":1.5")),
        RefusalReason::BadDeadline
    );
    assert_eq!(
        reason(&spawn_line("").replace(":1000", ":-4")),
        RefusalReason::BadDeadline
    );
    assert_eq!(
        reason(&spawn_line("").replace("\"discard\"", "\"keep\"")),
        RefusalReason::BadCapture
    );
    assert_eq!(
        reason(&spawn_line(r#","name":"a/b""#)),
        RefusalReason::BadName
    );
    assert_eq!(
        reason(&spawn_line("").replace("\"pid\":5", "\"pid\":\"5\"")),
        RefusalReason::BadCaller
    );
    let big = spawn_line(&format!(r#","name":"{}""#, "n".repeat(5000)));
    assert_eq!(reason(&big), RefusalReason::Oversize);
    assert_eq!(
        parse_request(b"{\"v\":1,\xff}").unwrap_err().reason,
        RefusalReason::Malformed
    );
}

#[test]
fn arrays_are_never_taken_for_objects() {
    let line = spawn_line("");
    let as_array = line.replace(r#"{"pid":5,"start_time":7,"uid":0}"#, "[5,7,0]");
    assert_ne!(as_array, line);
    assert_eq!(reason(&as_array), RefusalReason::BadCaller);
    let whole =
        r#"[1,"spawn","a1",{"pid":5,"start_time":7,"uid":0},"r1",["/bin/true"],1000,"discard"]"#;
    assert_eq!(reason(whole), RefusalReason::Malformed);
    assert_eq!(reason(" \n [1]"), RefusalReason::Malformed);
}

#[test]
fn refusals_keep_the_address_when_they_can() {
    let r = parse_request(spawn_line(r#","x":1"#).as_bytes()).unwrap_err();
    assert_eq!(r.id.as_deref(), Some("a1"));
    assert_eq!(r.reply.as_deref(), Some("r1"));
    let r = parse_request(spawn_line("").replace(":1000", ":0").as_bytes()).unwrap_err();
    assert_eq!(r.reply.as_deref(), Some("r1"));
}

#[test]
fn a_bad_id_is_still_answered() {
    for bad in ["\"a b\"", "5", "null"] {
        let r = parse_request(spawn_line("").replace("\"a1\"", bad).as_bytes()).unwrap_err();
        assert_eq!(r.reason, RefusalReason::BadId);
        assert_eq!(r.id, None);
        assert_eq!(r.reply.as_deref(), Some("r1"), "{bad}");
    }
}

#[test]
fn stop_takes_no_spawn_fields() {
    let line =
        r#"{"v":1,"op":"stop","id":"s","caller":{"pid":5,"start_time":7,"uid":0},"reply":"r"}"#;
    assert_eq!(parse_request(line.as_bytes()).unwrap().op, Op::Stop);
    let bad = line.replace("\"reply\":\"r\"", "\"reply\":\"r\",\"argv\":[\"/x\"]");
    assert_eq!(reason(&bad), RefusalReason::Malformed);
    let null = line.replace("\"reply\":\"r\"", "\"reply\":\"r\",\"argv\":null");
    assert_eq!(
        reason(&null),
        RefusalReason::Malformed,
        "an explicit null is present"
    );
}

#[test]
fn explicit_null_is_a_wrong_type() {
    assert_eq!(
        reason(&spawn_line(r#","name":null"#)),
        RefusalReason::BadName
    );
    assert_eq!(
        reason(&spawn_line("").replace(":1000", ":null")),
        RefusalReason::BadDeadline
    );
    assert_eq!(
        reason(&spawn_line("").replace("\"discard\"", "null")),
        RefusalReason::BadCapture
    );
}

mod props {
    use proptest::prelude::*;
    use proptest::test_runner::Config;
    use rea::protocol::{parse_request, Caller, Capture, Op, ParsedRequest, Request, MAX_REQUEST};
    use rea::vocab::StopSignal;
    use serde_json::Value;

    fn config() -> Config {
        let long = std::env::var_os("REA_LONG_PROPTEST").is_some_and(|v| v == "1");
        Config {
            cases: if long { 20_000 } else { 64 },
            failure_persistence: None,
            ..Config::default()
        }
    }

    fn token() -> impl Strategy<Value = String> {
        "[A-Za-z0-9_.-]{1,64}"
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![Just(Op::Spawn), Just(Op::Stop), Just(Op::Close)]
    }

    /// A request the protocol allows (argv[0] absolute, no NUL, ...).
    fn request() -> impl Strategy<Value = Request> {
        (
            op(),
            token(),
            token().prop_filter("not . or ..", |n| n != "." && n != ".."),
            (1i32..=i32::MAX, any::<u64>(), any::<u32>()),
            "/[^\u{0}]{0,40}",
            proptest::collection::vec("[^\u{0}]{0,20}", 0..5),
            1u64..=u64::MAX,
            any::<bool>(),
            proptest::option::of(token()),
        )
            .prop_map(
                |(op, id, reply, (pid, start_time, uid), argv0, rest, deadline, capture, name)| {
                    let spawn = op == Op::Spawn;
                    let mut argv = vec![argv0];
                    argv.extend(rest);
                    Request {
                        v: 1,
                        op,
                        id,
                        caller: Caller {
                            pid,
                            start_time,
                            uid,
                        },
                        reply,
                        argv: spawn.then_some(argv),
                        deadline_ms: spawn.then_some(deadline),
                        capture: spawn.then_some(if capture {
                            Capture::Capture
                        } else {
                            Capture::Discard
                        }),
                        name: if spawn { name } else { None },
                        // Half the deadline, on every other request.
                        inner_alarm_ms: (spawn && deadline > 1 && capture).then_some(deadline / 2),
                        // A stop signal on every other request, the default otherwise.
                        stop_signal: (spawn && !capture).then_some(StopSignal::Usr1),
                        cwd: None,
                        env: None,
                        stdin: None,
                    }
                },
            )
    }

    /// Any JSON value, small.
    fn json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            "[ -~]{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map("[a-z_]{1,12}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    const KEYS: &[&str] = &[
        "v",
        "op",
        "id",
        "caller",
        "reply",
        "argv",
        "deadline_ms",
        "capture",
        "name",
        "extra",
    ];

    /// A mutation of a good request's JSON: a field removed, replaced by
    /// any value, or added. Many stay acceptable, many do not.
    fn mutated() -> impl Strategy<Value = Vec<u8>> {
        (
            request(),
            proptest::collection::vec((0usize..3, 0..KEYS.len(), json()), 0..3),
        )
            .prop_map(|(req, muts)| {
                let mut v = serde_json::to_value(&req).unwrap();
                let obj = v.as_object_mut().unwrap();
                for (kind, k, val) in muts {
                    let key = KEYS[k].to_string();
                    match kind {
                        0 => {
                            obj.remove(&key);
                        }
                        1 => {
                            if obj.contains_key(&key) {
                                obj.insert(key, val);
                            }
                        }
                        _ => {
                            obj.insert(key, val);
                        }
                    }
                }
                serde_json::to_vec(&v).unwrap()
            })
    }

    /// The request an accepted parse stands for.
    fn as_request(p: &ParsedRequest) -> Request {
        Request {
            v: 1,
            op: p.op,
            id: p.id.clone(),
            caller: p.caller,
            reply: p.reply.clone(),
            argv: p.spawn.as_ref().map(|s| s.argv.clone()),
            deadline_ms: p.spawn.as_ref().map(|s| s.deadline_ms),
            capture: p.spawn.as_ref().map(|s| s.capture),
            name: p.spawn.as_ref().and_then(|s| s.name.clone()),
            inner_alarm_ms: p.spawn.as_ref().and_then(|s| s.inner_alarm_ms),
            // TERM is the default: the generator leaves it out, as clients do.
            stop_signal: p
                .spawn
                .as_ref()
                .map(|s| s.stop_signal)
                .filter(|s| *s != StopSignal::Term),
            cwd: p.spawn.as_ref().and_then(|s| s.cwd.clone()),
            env: p
                .spawn
                .as_ref()
                .and_then(|s| s.env.clone())
                .map(|e| e.into_iter().collect()),
            stdin: p.spawn.as_ref().and_then(|s| s.stdin.clone()),
        }
    }

    fn roundtrip(p: &ParsedRequest) -> Result<(), TestCaseError> {
        let req = as_request(p);
        let text = serde_json::to_vec(&req).unwrap();
        if text.len() + 2 > MAX_REQUEST {
            return Ok(()); // a request that fits only once escaped differently
        }
        let again = parse_request(&text)
            .map_err(|e| TestCaseError::fail(format!("re-serialised request refused: {e:?}")))?;
        prop_assert_eq!(&again, p);
        prop_assert_eq!(as_request(&again), req);
        Ok(())
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..5000)) {
            let _ = parse_request(&data);
        }

        #[test]
        fn mutated_requests_never_panic_and_accepted_ones_roundtrip(text in mutated()) {
            if let Ok(p) = parse_request(&text) {
                roundtrip(&p)?;
            }
        }

        #[test]
        fn a_valid_request_is_accepted_and_roundtrips(req in request()) {
            let text = serde_json::to_vec(&req).unwrap();
            prop_assume!(text.len() + 2 <= MAX_REQUEST);
            let p = parse_request(&text)
                .map_err(|e| TestCaseError::fail(format!("{e:?} for {}", String::from_utf8_lossy(&text))))?;
            prop_assert_eq!(as_request(&p), req);
            roundtrip(&p)?;
        }
    }
}
