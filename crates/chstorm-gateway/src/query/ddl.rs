//! `ddl`: the warning a statement gets when the gateway can tell it makes a table that will
//! keep its rows on one replica: a `CREATE` without `ON CLUSTER` whose engine stores rows where
//! it runs ([`chstorm_sql::ddl::local_create`]), sent outside a session. Such a statement runs on
//! the one replica the gateway picks (as any statement without `ON CLUSTER` does), and later
//! reads through the gateway go to any replica, most of which have no such table. The answer
//! carries the warning in `X-Chstorm-Warning`; the statement itself runs unchanged.

use crate::query::plan::{Plan, Target};
use chstorm_sql::statement::StatementKind;

/// The `X-Chstorm-Warning` value.
pub const ONE_REPLICA: &str = "this CREATE has no ON CLUSTER and its engine keeps rows where it runs: the table \
exists on the replica in X-Chstorm-Replica only, while reads through the gateway go to any replica; create it with \
ON CLUSTER and a Replicated engine (docs/GATEWAY.md, DDL through the gateway)";

/// The warning for `plan` of statement `sql`, if it needs one.
pub fn warning(plan: &Plan, sql: Option<&str>) -> Option<&'static str> {
    if plan.kind != StatementKind::Write || matches!(plan.target, Target::Session(_)) {
        return None;
    }
    let sql = sql?;
    chstorm_sql::lexer::Grammar::ALL.iter().find_map(|g| chstorm_sql::ddl::local_create(sql, *g)).map(|_| ONE_REPLICA)
}
