//! The request parser (`rea::protocol::parse_request`): every shape error
//! has its own reason code, refusals keep the address they can, arrays are
//! never taken for objects. Pure: no process is started here.

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
