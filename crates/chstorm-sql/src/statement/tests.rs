use super::*;

fn classes(sql: &str) -> Vec<Class> {
    classify(&sql_tokens(sql, Grammar::Current).0)
}

fn one(sql: &str) -> Class {
    let c = classes(sql);
    assert_eq!(c.len(), 1, "{sql}: {c:?}");
    c.into_iter().next().unwrap()
}

fn name(db: Option<&str>, t: &str) -> Name {
    Name { database: db.map(str::to_string), table: t.to_string() }
}

#[test]
fn reads_and_writes() {
    for q in [
        "SELECT 1",
        "((SELECT 1))",
        "with 1 as x select x",
        "SHOW TABLES",
        "DESC t",
        "describe table t",
        "EXISTS t",
        "EXPLAIN AST DROP TABLE t",
        "FROM t SELECT 1",
        "CHECK GRANT SELECT ON t",
    ] {
        assert_eq!(one(q), Class::Read, "{q}");
    }
    for (q, c) in [
        ("INSERT INTO t VALUES (1)", Class::Insert),
        ("WITH 1 AS x INSERT INTO t SELECT x", Class::Insert),
        ("SET max_threads = 1", Class::Set),
        ("USE db", Class::Use),
        ("CREATE TABLE t (x UInt8) ENGINE = Memory", Class::Write),
        ("CREATE DATABASE d", Class::Write),
        ("ALTER TABLE t DELETE WHERE 1", Class::Write),
        ("OPTIMIZE TABLE t FINAL", Class::Write),
        ("DROP TEMPORARY TABLE t", Class::Write),
        ("CREATE TEMPORARY TABLE t (x UInt8)", Class::Write),
        ("DROP INDEX i ON t", Class::Write),
        ("DELETE FROM t WHERE 1", Class::Write),
        ("UPDATE t SET x = 1 WHERE 1", Class::Write),
        ("SET TRANSACTION SNAPSHOT 1", Class::Write),
        ("", Class::Unknown(String::new())),
        ("SELECTX 1", Class::Unknown("SELECTX".into())),
        ("'x'", Class::Unknown("'x'".into())),
    ] {
        assert_eq!(one(q), c, "{q}");
    }
}

#[test]
fn operators_by_kind() {
    use Operator::*;
    for (q, op) in [
        ("KILL QUERY WHERE 1", Kill),
        ("kill mutation where 1", Kill),
        ("SYSTEM SHUTDOWN", System),
        ("SYSTEM DROP DNS CACHE", System),
        ("CREATE USER u", Access),
        ("ALTER USER u IDENTIFIED BY 'x'", Access),
        ("DROP ROLE r", Access),
        ("CREATE ROW POLICY p ON t USING 1", Access),
        ("DROP MASKING POLICY p ON t", Access),
        ("CREATE SETTINGS PROFILE p", Access),
        ("DROP PROFILE p", Access),
        ("CREATE QUOTA q", Access),
        ("GRANT SELECT ON *.* TO u", Access),
        ("REVOKE ALL ON *.* FROM u", Access),
        ("SET ROLE r", Access),
        ("SET DEFAULT ROLE r TO u", Access),
        ("EXECUTE AS u SELECT 1", Access),
        ("MOVE USER u TO disk", Access),
        ("DROP DATABASE d", Drop),
        ("DETACH DATABASE d", Drop),
        ("ATTACH DATABASE d", Drop),
        ("RENAME DATABASE a TO b", Drop),
        ("ALTER DATABASE d MODIFY COMMENT 'x'", Drop),
        ("EXCHANGE DATABASES a AND b", Drop),
        ("TRUNCATE ALL TABLES FROM d", Drop),
        ("CREATE OR REPLACE DATABASE d", Drop),
        ("CREATE FUNCTION f AS x -> x", Server),
        ("DROP FUNCTION f", Server),
        ("CREATE NAMED COLLECTION c AS a = 1", Server),
        ("DROP WORKLOAD w", Server),
        ("CREATE RESOURCE r (READ DISK d)", Server),
        ("BACKUP TABLE t TO Disk('d', 'x')", Server),
        ("RESTORE TABLE t FROM Disk('d', 'x')", Server),
    ] {
        assert_eq!(one(q), Class::Operator(op), "{q}");
    }
}

#[test]
fn the_tables_a_drop_names() {
    for (q, names) in [
        ("DROP TABLE t", vec![name(None, "t")]),
        ("DROP TABLE IF EXISTS db.t ON CLUSTER c SYNC", vec![name(Some("db"), "t")]),
        ("DROP TABLE IF EMPTY a, `b`.c", vec![name(None, "a"), name(Some("b"), "c")]),
        ("DROP VIEW v", vec![name(None, "v")]),
        ("DROP DICTIONARY d.x", vec![name(Some("d"), "x")]),
        ("DETACH TABLE t PERMANENTLY", vec![name(None, "t")]),
        ("ATTACH TABLE t FROM '/x' (x UInt8) ENGINE = Memory", vec![name(None, "t")]),
        (
            "RENAME TABLE a TO b, db.c TO db2.d",
            vec![name(None, "a"), name(None, "b"), name(Some("db"), "c"), name(Some("db2"), "d")],
        ),
        ("EXCHANGE TABLES a AND b.c", vec![name(None, "a"), name(Some("b"), "c")]),
        ("TRUNCATE t", vec![name(None, "t")]),
        ("TRUNCATE TABLE IF EXISTS db.t", vec![name(Some("db"), "t")]),
        ("UNDROP TABLE db.t", vec![name(Some("db"), "t")]),
        ("CREATE OR REPLACE TABLE t (x UInt8) ENGINE = Memory", vec![name(None, "t")]),
        ("REPLACE TABLE t (x UInt8) ENGINE = Memory", vec![name(None, "t")]),
        ("CREATE OR REPLACE VIEW v AS SELECT 1", vec![name(None, "v")]),
    ] {
        assert_eq!(one(q), Class::Drop(names), "{q}");
    }
    // A DROP-like statement whose names do not read: it may reach any table.
    assert_eq!(one("DROP TABLE"), Class::Operator(Operator::Drop));
}

#[test]
fn several_statements_are_classed_each() {
    assert_eq!(classes("SELECT 1 PARALLEL WITH SYSTEM SHUTDOWN"), [Class::Read, Class::Operator(Operator::System)]);
    assert_eq!(classes("SELECT 1; KILL QUERY WHERE 1"), [Class::Read, Class::Operator(Operator::Kill)]);
    assert_eq!(classes("SELECT 1;"), [Class::Read]);
    assert_eq!(classes(";"), [Class::Unknown(String::new())]);
    assert_eq!(classes("SELECT (1; 2)"), [Class::Read]);
}

/// Where the data starts, for the forms of an INSERT's head that 26.9's parser reads (and
/// `FORMAT` or `VALUES` used as a name, which are no data).
#[test]
fn where_an_inserts_data_starts() {
    let data = |q: &str| sql_tokens(q, Grammar::Current).1;
    let at = |q: &str, from: &str| q.to_ascii_lowercase().rfind(&from.to_ascii_lowercase()).unwrap() + from.len();
    for q in [
        "INSERT INTO t VALUES (1)",
        "insert into db.t(c) values (1)",
        "INSERT INTO TABLE `t` (a, b) VALUES (1, 2)",
        "INSERT INTO t (* EXCEPT (y)) VALUES (1)",
        "INSERT INTO t SETTINGS a = 1, b = 'x' VALUES (1)",
        "INSERT INTO t SETTINGS a = -1 VALUES (1)",
        "INSERT INTO FUNCTION file('x.csv', CSV, 'x UInt8') PARTITION BY x VALUES (1)",
        "WITH 1 AS x INSERT INTO t VALUES (1)",
    ] {
        assert_eq!(data(q), InsertData::Values(at(q, "VALUES")), "{q}");
    }
    let q = "INSERT INTO t FORMAT Values (1)";
    assert_eq!(data(q), InsertData::Values(at(q, "Values")));
    for (q, name) in [
        ("INSERT INTO t FORMAT TSV\n1\t2", "TSV"),
        ("INSERT INTO t (c) SETTINGS a = 1 FORMAT CSV\n1", "CSV"),
        ("INSERT INTO f.t FORMAT JSONEachRow {}", "JSONEachRow"),
        ("INSERT INTO t FORMAT TSV\nVALUES (1)", "TSV"),
    ] {
        assert_eq!(data(q), InsertData::Format(at(q, name)), "{q}");
    }
    let q = "INSERT INTO t FORMAT TSV SETTINGS max_threads = 1\n1";
    assert_eq!(data(q), InsertData::Format(q.find('\n').unwrap()));
    for q in [
        "INSERT INTO t SELECT count() AS format FROM numbers(3) SETTINGS max_rows_to_read = 0",
        "INSERT INTO t SELECT 1 AS values",
        "INSERT INTO t (format, values) SELECT 1, 2",
        "INSERT INTO t (c) (SELECT 1)",
        "INSERT INTO t SELECT 1 FORMAT TSV",
        "INSERT INTO t FROM INFILE 'x' FORMAT CSV",
        "WITH (SELECT 1) AS x INSERT INTO t SELECT x AS format",
        "SELECT 1 FORMAT TSV",
        "SELECT 1 AS values",
    ] {
        assert_eq!(data(q), InsertData::None, "{q}");
    }
    // Everything up to the data is read, the SETTINGS after an alias named format too.
    let (toks, _) = sql_tokens("INSERT INTO t SELECT 1 AS format SETTINGS max_rows_to_read = 0", Grammar::Current);
    assert_eq!(toks.last().map(|t| t.text), Some("0"));
}
