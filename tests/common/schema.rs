//! Validating records, requests, replies and verdicts against audit-schema/.
