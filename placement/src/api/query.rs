//! Query-string parsing shared by the list endpoints: repeated keys are
//! kept (upstream allows `required=` and `member_of=` more than once), and
//! unknown keys are refused with upstream's message.

use crate::error::{ErrorCode, PlacementError, Result};

/// The query's key/value pairs, in order.
pub struct Query(pub Vec<(String, String)>);

impl Query {
    /// Parses a raw query string.
    pub fn parse(raw: Option<&str>) -> Result<Self> {
        let pairs: Vec<(String, String)> = serde_urlencoded::from_str(raw.unwrap_or(""))
            .map_err(|e| PlacementError::bad_request(format!("Invalid query string: {e}")))?;
        Ok(Self(pairs))
    }

    /// Refuses keys outside `allowed`.
    pub fn only(&self, allowed: &[&str]) -> Result<()> {
        let mut bad: Vec<&str> = self
            .0
            .iter()
            .map(|(k, _)| k.as_str())
            .filter(|k| !allowed.contains(k))
            .collect();
        bad.dedup();
        if bad.is_empty() {
            return Ok(());
        }
        let list = bad
            .iter()
            .map(|k| format!("'{k}'"))
            .collect::<Vec<_>>()
            .join(", ");
        let verb = if bad.len() == 1 { "was" } else { "were" };
        Err(PlacementError::bad_request(format!(
            "Invalid query string parameters: Additional properties are not allowed ({list} {verb} unexpected)"
        )))
    }

    /// The single value of `key`; a repeated key is a 400.
    pub fn one(&self, key: &str) -> Result<Option<&str>> {
        let mut it = self.0.iter().filter(|(k, _)| k == key);
        let first = it.next().map(|(_, v)| v.as_str());
        if it.next().is_some() {
            return Err(PlacementError::client(
                axum::http::StatusCode::BAD_REQUEST,
                ErrorCode::QueryDuplicateKey,
                format!("Query parameter '{key}' may only be given once"),
            ));
        }
        Ok(first)
    }

    /// Every value of `key`.
    pub fn all(&self, key: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// Parses `resources=CLASS:N,CLASS:N` with upstream's messages.
pub fn parse_resources(value: &str, param: &str) -> Result<Vec<(String, i64)>> {
    let badly_formed = |got: &str| {
        PlacementError::bad_request(format!(
            "Badly formed {param} parameter. Expected {param} query string parameter in form: \
             {param}=VCPU:2,MEMORY_MB:1024. Got: {got}."
        ))
    };
    if value.is_empty() {
        return Err(badly_formed("empty string"));
    }
    let mut out: Vec<(String, i64)> = Vec::new();
    for part in value.split(',') {
        let (rc, amount) = part.split_once(':').ok_or_else(|| badly_formed(part))?;
        let rc = rc.trim();
        if rc.is_empty() {
            return Err(badly_formed(part));
        }
        let amount: i64 = amount.trim().parse().map_err(|_| {
            PlacementError::bad_request(format!(
                "Requested resource {rc} expected positive integer amount. Got: {amount}."
            ))
        })?;
        if amount < 1 {
            return Err(PlacementError::bad_request(format!(
                "Requested resource {rc} requires amount >= 1. Got: {amount}."
            )));
        }
        if out.iter().any(|(r, _)| r == rc) {
            return Err(PlacementError::bad_request(format!(
                "Badly formed {param} parameter. Resource class {rc} was specified twice."
            )));
        }
        out.push((rc.to_owned(), amount));
    }
    Ok(out)
}
