//! Placement microversions: `OpenStack-API-Version: placement X.Y`, from 1.0
//! to [`MAX`], with upstream's negotiation rules: no header means 1.0,
//! `latest` means [`MAX`], a malformed value is a 400 and a version outside
//! the range a 406.

/// Lowest supported minor version (of major 1).
pub const MIN: u16 = 0;
/// Highest supported minor version (of major 1).
pub const MAX: u16 = 39;
/// The header's name.
pub const HEADER: &str = "openstack-api-version";

/// The microversion a request asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Microversion(pub u16);

impl Microversion {
    /// Whether this is at least 1.`minor`.
    pub fn at_least(self, minor: u16) -> bool {
        self.0 >= minor
    }
    /// The response header value.
    pub fn header_value(self) -> String {
        format!("placement 1.{}", self.0)
    }
}

/// Why a version header was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionError {
    /// 400: not a version string.
    Invalid(String),
    /// 406: a version we do not serve.
    Unacceptable(String),
}

/// Parses the `OpenStack-API-Version` header (which may name several
/// services, comma separated) for the `placement` entry.
pub fn negotiate(header: Option<&str>) -> Result<Microversion, VersionError> {
    let Some(header) = header else {
        return Ok(Microversion(MIN));
    };
    let entry = header.split(',').map(str::trim).find_map(|part| {
        let mut it = part.splitn(2, char::is_whitespace);
        let service = it.next()?;
        service
            .eq_ignore_ascii_case("placement")
            .then(|| it.next().unwrap_or("").trim())
    });
    let Some(value) = entry else {
        return Ok(Microversion(MIN));
    };
    if value.eq_ignore_ascii_case("latest") {
        return Ok(Microversion(MAX));
    }
    let parsed = value
        .split_once('.')
        .and_then(|(maj, min)| Some((maj.parse::<u16>().ok()?, min.parse::<u16>().ok()?)));
    match parsed {
        None => Err(VersionError::Invalid(value.to_owned())),
        Some((1, minor)) if (MIN..=MAX).contains(&minor) => Ok(Microversion(minor)),
        Some(_) => Err(VersionError::Unacceptable(value.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_follows_upstream() {
        assert_eq!(negotiate(None), Ok(Microversion(0)));
        assert_eq!(negotiate(Some("placement 1.17")), Ok(Microversion(17)));
        assert_eq!(
            negotiate(Some("compute 2.1, placement 1.3")),
            Ok(Microversion(3))
        );
        assert_eq!(negotiate(Some("compute 2.1")), Ok(Microversion(0)));
        assert_eq!(negotiate(Some("placement latest")), Ok(Microversion(MAX)));
        assert_eq!(
            negotiate(Some("placement pony.horse")),
            Err(VersionError::Invalid("pony.horse".into()))
        );
        assert_eq!(
            negotiate(Some("placement 1.2.3")),
            Err(VersionError::Invalid("1.2.3".into()))
        );
        assert_eq!(
            negotiate(Some("placement 0.5")),
            Err(VersionError::Unacceptable("0.5".into()))
        );
        assert_eq!(
            negotiate(Some("placement 1.40")),
            Err(VersionError::Unacceptable("1.40".into()))
        );
    }
}
