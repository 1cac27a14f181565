//! Shared test support. Each integration test file does `mod common;` and
//! uses what it needs.
#![allow(dead_code)]

pub mod counted;
pub mod harness;
pub mod logs;
pub mod raw;
pub mod recovery;
pub mod reuse;
pub mod schema;
pub mod stop;
