//! ClickHouse's SQL as chstorm's gateway needs it, read as the servers behind it read it: pure
//! functions over a query's text, with no I/O, no clocks and no randomness.
//!
//! * [`lexer`]: the lexers of two grammars, 18.16's and the current one (24.x to 26.x), on bytes
//!   (a query that is not UTF-8 lexes as the server lexes it); every other module reads its
//!   tokens, so comments, string literals, quoted names, case and white space neither hide nor
//!   fake anything.
//! * [`reading`]: one reading of a statement for every rule: lexed under the grammar of each
//!   server it may reach, and kept only when they all read it alike; otherwise the place where
//!   they part, which the gateway refuses for a user with rules and never sends twice.
//! * [`statement`]: what a statement is (a read, an insert, `SET`, `USE`, a write, a drop of
//!   named tables, an operator's statement), and where an INSERT's data starts.
//! * [`route`]: shard routing: the key (`shard_key` URL parameter, `X-Chstorm-Shard-Key` header,
//!   or `where_column = <literal>` in WHERE), the sharding expression's value as the Distributed
//!   engine computes it, the weighted choice of the shard, and the rewrite of the Distributed
//!   table names to the local ones; [`route::Router`] does all of it for one cluster's
//!   `routing:` config, and every reason to fan out instead is an [`route::Unrouted`].
//! * [`cityhash`]: CityHash64 v1.0.2 and `intHash64`, bit-exact with what 18.16 bundles.
//! * [`ddl`]: which `CREATE` statements make a table that keeps its rows on one server.
//! * [`rules`]: what a query asks of the server beyond reading tables (the settings it changes,
//!   the table functions, engines and dictionary sources it calls, and which of those reach
//!   outside the server) and how deep it nests (18.16 dies of a stack overflow from about 760
//!   levels); the gateway's user rules and its depth limit are built on them.
//!
//! Each module's doc records the behaviour it follows, as seen on a real server; the tests
//! check it against two: `tests/grammar_vs_server.rs` (a generated corpus run by a real 18.16),
//! `tests/grammar_vs_chdb.rs` (the same corpus parsed by ClickHouse 26.9, chdb-core), and
//! `tests/route_vs_server.rs` (the hashes and the whole routing chain against 18.16).
//!
//! # Boundaries
//!
//! This crate owns the reading of SQL text. It must not import tokio, hyper, tower, http or any
//! other chstorm crate (chstorm-proto's rules included: nothing here needs them); its one
//! dependency is `thiserror`. HTTP parameters, request bodies and the protocols stay in
//! chstorm-gateway, which calls these functions with the query's text.

pub mod cityhash;
pub mod ddl;
pub mod lexer;
pub mod reading;
pub mod route;
pub mod rules;
pub mod statement;

/// The inputs of the no-panic tests over SQL-ish text: `count` strings from `seed`, each of
/// fewer than `max` pieces drawn from `pieces`.
#[cfg(test)]
pub(crate) fn random_texts<'a>(
    pieces: &'a [&'a str],
    seed: u64,
    count: usize,
    max: usize,
) -> impl Iterator<Item = String> + 'a {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    (0..count).map(move |_| {
        let n = rng.gen_range(0..max);
        (0..n).map(|_| pieces[rng.gen_range(0..pieces.len())]).collect()
    })
}
