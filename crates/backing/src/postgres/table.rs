//! The table: the SQL of every statement (the validated, quoted name spliced in), and
//! its creation and shape check at the first connection that gets through.

use std::collections::HashMap;

use tokio_postgres::types::Type;
use tokio_postgres::Row;

use super::conn::{Failure, Lease};
use crate::row::Columns;
use crate::BackingError;

/// The SQL text of every statement, with the (validated, quoted) table name spliced in.
pub(super) struct Sql {
    /// The quoted table name, also as the argument of `to_regclass`.
    pub(super) table: String,
    /// `CREATE TABLE IF NOT EXISTS` with the schema of the crate docs.
    create: String,
    /// The placeholder insert of an apply.
    pub(super) insert: String,
    /// The locking read of an apply, in key order.
    pub(super) lock: String,
    /// The read of a fetch.
    pub(super) select: String,
    /// The write of the rows an apply changed.
    pub(super) update: String,
}

impl Sql {
    pub(super) fn new(table: String) -> Sql {
        Sql {
            create: format!(
                "CREATE TABLE IF NOT EXISTS {table} (\
                 key bytea PRIMARY KEY, \
                 value bytea, \
                 state bytea, \
                 ts bigint NOT NULL DEFAULT 0, \
                 updated_at timestamptz NOT NULL DEFAULT now())"
            ),
            insert: format!(
                "INSERT INTO {table} (key) SELECT k FROM unnest($1::bytea[]) AS u(k) \
                 ORDER BY k ON CONFLICT (key) DO NOTHING"
            ),
            lock: format!(
                "SELECT key, value, state, ts FROM {table} WHERE key = ANY($1::bytea[]) \
                 ORDER BY key FOR UPDATE"
            ),
            select: format!(
                "SELECT key, value, state, ts FROM {table} WHERE key = ANY($1::bytea[])"
            ),
            update: format!(
                "UPDATE {table} AS t SET value = u.value, state = u.state, ts = u.ts, \
                 updated_at = now() \
                 FROM unnest($1::bytea[], $2::bytea[], $3::bytea[], $4::int8[]) \
                 AS u(key, value, state, ts) WHERE t.key = u.key"
            ),
            table,
        }
    }
}

/// Creates the table if it does not exist and checks its shape (several nodes creating it
/// at once is fine: the losers see it exists).
pub(super) async fn ensure(sql: &Sql, lease: &Lease) -> Result<(), Failure> {
    let c = lease.client();
    // Checked first, so a user allowed to use the table but not to create tables in
    // its schema is not refused (CREATE ... IF NOT EXISTS checks the privilege first).
    let exists: bool = c
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&sql.table])
        .await?
        .try_get(0)?;
    if !exists {
        match c.batch_execute(&sql.create).await {
            Ok(()) => tracing::info!(table = %sql.table, "created the backing table"),
            // Another call or node created it at the same moment: IF NOT EXISTS does not
            // cover a concurrent creation, which fails on the table's name (42P07), its
            // row type's name (42710) or the catalog's unique index (23505).
            Err(e) if matches!(sqlstate(&e), Some("42P07" | "42710" | "23505")) => {}
            Err(e) => return Err(e.into()),
        }
    }
    // ON CONFLICT (key) needs a unique index on key alone (preparing the insert does not
    // check it: the planner does, at the first execution).
    let unique_key: bool = c
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_index i JOIN pg_attribute a \
                 ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0] \
                 WHERE i.indrelid = to_regclass($1) AND i.indisunique AND i.indnkeyatts = 1 \
                 AND i.indpred IS NULL AND a.attname = 'key')",
            &[&sql.table],
        )
        .await?
        .try_get(0)?;
    if !unique_key {
        return Err(Failure::Final(BackingError::Config(format!(
            "table {}: column key is not its primary key (no unique index on key alone)",
            sql.table
        ))));
    }
    // Preparing every statement checks the columns, and updated_at; the result
    // columns' types are checked here.
    let select = c.prepare_cached(&sql.select).await?;
    c.prepare_cached(&sql.insert).await?;
    c.prepare_cached(&sql.update).await?;
    let expected = [
        ("key", Type::BYTEA),
        ("value", Type::BYTEA),
        ("state", Type::BYTEA),
        ("ts", Type::INT8),
    ];
    for (column, (name, ty)) in select.columns().iter().zip(expected) {
        if column.type_() != &ty {
            return Err(Failure::Final(BackingError::Config(format!(
                "table {}: column {name} is {}, expected {ty}",
                sql.table,
                column.type_()
            ))));
        }
    }
    Ok(())
}

/// The rows of a `SELECT key, value, state, ts`, by key. The types were checked when the
/// table was; a row that still does not convert is reported, never a panic.
pub(super) fn rows_by_key(rows: &[Row]) -> Result<HashMap<Vec<u8>, Columns>, Failure> {
    rows.iter()
        .map(|row| {
            let key: Vec<u8> = row.try_get(0)?;
            let columns = Columns {
                value: row.try_get(1)?,
                state: row.try_get(2)?,
                ts: row.try_get(3)?,
            };
            Ok((key, columns))
        })
        .collect::<Result<_, tokio_postgres::Error>>()
        .map_err(|e| Failure::Final(BackingError::Config(format!("unexpected row: {e}"))))
}

fn sqlstate(e: &tokio_postgres::Error) -> Option<&str> {
    e.as_db_error().map(|db| db.code().code())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sql_uses_the_quoted_table() {
        let sql = Sql::new("\"app\".\"kv\"".into());
        for text in [
            &sql.create,
            &sql.insert,
            &sql.lock,
            &sql.select,
            &sql.update,
        ] {
            assert!(text.contains("\"app\".\"kv\""), "{text}");
        }
    }
}
