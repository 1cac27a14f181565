use crate::common;

use common::harness::*;

#[test]
fn stop_requested_stops_a_whole_nasty_tree() {
    let sibling = Sibling::start();
    let mut w = Watchdog::start(&[]);
    let mut oracle = Oracle::new(&w.scratch, "oracle");
    let tree = [
        python(),
        &fixture("tree.py"),
        "--oracle",
        oracle.arg(),
        "--shape",
        "escapee",
        "--shape",
        "doublefork",
        "--shape",
        "termignore",
        "--shape",
        "stopped",
        "--shape",
        "termfork",
        "--shape",
        "chain:200",
        "--shape",
        "zombies:5",
        "--shape",
        "hopper",
    ];
    let submit = w.submit_bg(&["--name", "install", "--deadline", "200s"], &tree);
    let (members, ready) = oracle.wait_ready(PATIENCE);
    assert_eq!(members.len() as u64, ready["count"].as_u64().unwrap());
    let held = Held::bind_all(&members);
    let hopper = members.iter().find(|m| m.role == "hopper").unwrap();
    assert_eq!(
        std::fs::read(format!("/proc/{}/cmdline", hopper.pid)).unwrap(),
        sibling.argv(),
        "the sibling has the same argv as the job's hopper"
    );
    let stop = w.stop();
    assert!(stop.status.success(), "{stop:?}");
    assert!(oracle.wait_eof(PATIENCE), "a tree member survived the stop");
    assert!(held.wait_all_exited(PATIENCE).is_empty());
    let out = output_within(submit, PATIENCE);
    assert_eq!(out.status.code(), Some(124), "{out:?}");
    let close = w.close();
    assert!(close.status.success(), "{close:?}");
    assert!(w.wait(PATIENCE).success());
    let (code, v) = w.verify(&["--staging", w.staging.to_str().unwrap()]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["stop_reason"], "stop_requested");
    sibling.assert_alive();
}
