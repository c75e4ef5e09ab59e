//! Schema upgrades of the API database and of every mapped cell database.

use migrations::Kind;

use crate::db::ApiDb;
use crate::url::{mask, validate_database_url};
use crate::Error;

/// One database's result.
#[derive(Debug)]
pub struct DbStatus {
    /// "api", or the cell's name/uuid.
    pub label: String,
    /// Ok(version, versions applied now) or the error.
    pub result: Result<(Option<i64>, Vec<i64>), Error>,
    /// 1-based position among the databases of this run, and their number.
    pub position: (usize, usize),
    /// How long this database took.
    pub elapsed: std::time::Duration,
}

/// Migrates the API database at `api_url`.
pub async fn sync_api(api_url: &str) -> Result<migrations::Applied, Error> {
    validate_database_url(api_url)?;
    migrations::migrate(Kind::Api, api_url)
        .await
        .map_err(|source| Error::Migrate {
            role: "API",
            url: mask(api_url),
            source,
        })
}

fn cell_label(c: &crate::CellMapping) -> String {
    format!("cell {} ({})", c.name_or_empty(), c.uuid)
}

/// Migrates the API database, then every cell database found in its cell
/// mappings, calling `progress` after each. A failing cell does not stop the
/// others. Fails only when the API database cannot be migrated or read.
pub async fn sync_all(
    api_url: &str,
    progress: &mut (dyn FnMut(&DbStatus) + Send),
) -> Result<Vec<DbStatus>, Error> {
    let started = std::time::Instant::now();
    let applied = sync_api(api_url).await?;
    let api_elapsed = started.elapsed();
    let api = ApiDb::open(api_url).await?;
    let cells = api.cells().await;
    api.close().await;
    let cells = cells?;
    let total = cells.len() + 1;
    let mut out = vec![DbStatus {
        label: "api".to_owned(),
        result: Ok((Some(applied.version), applied.applied)),
        position: (1, total),
        elapsed: api_elapsed,
    }];
    progress(&out[0]);
    for (i, cell) in cells.into_iter().enumerate() {
        let started = std::time::Instant::now();
        let result = migrations::migrate(Kind::Cell, &cell.database_connection)
            .await
            .map(|a| (Some(a.version), a.applied))
            .map_err(|source| Error::Migrate {
                role: "cell",
                url: mask(&cell.database_connection),
                source,
            });
        let st = DbStatus {
            label: cell_label(&cell),
            result,
            position: (i + 2, total),
            elapsed: started.elapsed(),
        };
        progress(&st);
        out.push(st);
    }
    Ok(out)
}

/// The schema version of the API database and of every cell database.
pub async fn versions(api_url: &str) -> Result<Vec<DbStatus>, Error> {
    validate_database_url(api_url)?;
    let v = migrations::version(Kind::Api, api_url)
        .await
        .map_err(|source| Error::Migrate {
            role: "API",
            url: mask(api_url),
            source,
        })?;
    let mut out = vec![DbStatus {
        label: "api".to_owned(),
        result: Ok((v, vec![])),
        position: (1, 1),
        elapsed: std::time::Duration::ZERO,
    }];
    if v.is_none() {
        return Ok(out);
    }
    let api = ApiDb::open(api_url).await?;
    let cells = api.cells().await;
    api.close().await;
    for cell in cells? {
        let result = migrations::version(Kind::Cell, &cell.database_connection)
            .await
            .map(|v| (v, vec![]))
            .map_err(|source| Error::Migrate {
                role: "cell",
                url: mask(&cell.database_connection),
                source,
            });
        out.push(DbStatus {
            label: cell_label(&cell),
            result,
            position: (0, 0),
            elapsed: std::time::Duration::ZERO,
        });
    }
    Ok(out)
}
