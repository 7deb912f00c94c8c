//! The query core, shared by both fronts (`crate::http`, `crate::native`): what a query is
//! ([`request`]), who sends it ([`auth`]), whether it may run now ([`admission`]), what to do
//! with it ([`plan`]; whether its answer may be shared, [`cacheable`]), what a `CREATE` that
//! stays on one replica is told ([`ddl`]), why it is refused ([`refusal`]: one kind gives the HTTP status and the
//! ClickHouse code), and the one place its end is recorded ([`exit`]). Below the attempt loop
//! and the fronts: nothing here names them.

pub mod admission;
pub mod auth;
pub mod cacheable;
pub mod ddl;
pub mod exit;
pub mod plan;
pub mod refusal;
pub mod request;
