//! Building audit logs with the library writer, for verify tests.
