//! The backend cluster as the gateway sees it: its replicas and their health, the choice of a
//! replica, the thread budget, and the connections to the replicas.
//!
//! * [`replica`]: one replica's runtime state (outstanding requests, error penalty) and its
//!   health state machine; [`balancer`]: selection over snapshots of which replicas are
//!   healthy (power of two choices with a seeded RNG; rendezvous hashing for sessions);
//!   [`health`]: the active probes. They are joined by snapshots and down signals.
//! * [`replication`]: each replica's replication delay and how it sorts replicas for reads and
//!   writes (pure); [`delay_probe`]: its query on the health loop.
//!   [`version`]: each replica's detected ClickHouse version, read by what differs between
//!   releases.
//! * [`budget`]: the per-replica thread budget (`threads:`); RAII grants.
//! * [`upstream`]: kept-alive pools per replica (one per worker) behind the `Backend` trait:
//!   [`h1`], the gateway's own HTTP/1 client, for `http://` replicas; hyper's for `https://`
//!   ones, whose connections are [`backend_io`]'s. Both reset a connection dropped
//!   mid-exchange, so a server never takes a cut-short body for a whole one. [`worker`]: the index of the worker thread running the
//!   caller, which the per-worker pools key on. [`login`]: the ClickHouse logins of a config,
//!   which the pools key on too.
//!
//! This layer names only the layers below it (`config`, `metrics`, `log`), never the query
//! path that uses it.

pub mod backend_io;
pub mod balancer;
pub mod budget;
pub mod delay_probe;
pub mod h1;
pub mod health;
pub mod login;
pub mod message;
pub mod replica;
pub mod replication;
pub mod server_settings;
pub mod upstream;
pub mod version;
pub mod worker;
