//! Shared test support, compiled once for the whole suite (`main.rs`);
//! each file does `use crate::common;` and uses what it needs.
#![allow(dead_code)]

pub mod counted;
pub mod exec;
pub mod fuse;
pub mod harness;
pub mod logs;
pub mod mounts;
pub mod raw;
pub mod recovery;
pub mod reuse;
pub mod schema;
pub mod stage;
pub mod stop;
pub mod typed;
