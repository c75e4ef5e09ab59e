//! Compute microversions: `OpenStack-API-Version: compute 2.x` (preferred)
//! or `X-OpenStack-Nova-API-Version: 2.x`; absent means 2.1, `latest` the
//! maximum. A malformed version is a 400, one outside 2.1 … [`MAX`] a 406.
//! Every versioned response says which version it answered with.

use axum::http::{HeaderMap, HeaderValue};

use super::error::ApiError;

/// The lowest supported microversion (2.1).
pub const MIN: Version = Version(1);
/// The highest supported microversion.
pub const MAX: Version = Version(104);

/// A compute microversion `2.<minor>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(pub u32);

impl Version {
    /// At least `2.<minor>`.
    pub fn at_least(self, minor: u32) -> bool {
        self.0 >= minor
    }

    /// `2.<minor>`.
    pub fn as_string(self) -> String {
        format!("2.{}", self.0)
    }

    /// The version a request asks for.
    pub fn from_headers(h: &HeaderMap) -> Result<Version, ApiError> {
        let mut requested = None;
        for v in h.get_all("openstack-api-version") {
            let s = v.to_str().unwrap_or("");
            for part in s.split(',') {
                let mut it = part.split_whitespace();
                if let (Some(svc), Some(ver)) = (it.next(), it.next()) {
                    if svc.eq_ignore_ascii_case("compute") {
                        requested = Some(ver.to_owned());
                    }
                }
            }
        }
        if requested.is_none() {
            if let Some(v) = h.get("x-openstack-nova-api-version") {
                requested = Some(v.to_str().unwrap_or("").trim().to_owned());
            }
        }
        let Some(r) = requested else {
            return Ok(MIN);
        };
        if r.eq_ignore_ascii_case("latest") {
            return Ok(MAX);
        }
        let parsed = r
            .split_once('.')
            .filter(|(maj, min)| {
                // Nova's `^([1-9]\d*)\.([1-9]\d*|0)$`: no leading zeros.
                !maj.is_empty()
                    && !min.is_empty()
                    && !maj.starts_with('0')
                    && (*min == "0" || !min.starts_with('0'))
                    && maj.bytes().all(|b| b.is_ascii_digit())
                    && min.bytes().all(|b| b.is_ascii_digit())
            })
            .and_then(|(maj, min)| Some((maj.parse::<u32>().ok()?, min.parse::<u32>().ok()?)));
        let Some((major, minor)) = parsed else {
            return Err(ApiError::BadRequest(format!(
                "API Version String {r} is of invalid format. Must be of format MajorNum.MinorNum."
            )));
        };
        if major != 2 || !(MIN.0..=MAX.0).contains(&minor) {
            return Err(ApiError::NotAcceptable(format!(
                "Version {r} is not supported by the API. Minimum is {} and maximum is {}.",
                MIN.as_string(),
                MAX.as_string()
            )));
        }
        Ok(Version(minor))
    }

    /// Adds the version headers to a response.
    pub fn stamp(self, h: &mut HeaderMap) {
        if let Ok(v) = HeaderValue::from_str(&format!("compute {}", self.as_string())) {
            h.insert("openstack-api-version", v);
        }
        if let Ok(v) = HeaderValue::from_str(&self.as_string()) {
            h.insert("x-openstack-nova-api-version", v);
        }
        h.insert(
            "vary",
            HeaderValue::from_static("OpenStack-API-Version, X-OpenStack-Nova-API-Version"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hv(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn parses_both_headers() {
        assert_eq!(Version::from_headers(&hv(&[])).unwrap(), MIN);
        assert_eq!(
            Version::from_headers(&hv(&[("openstack-api-version", "compute 2.60")])).unwrap(),
            Version(60)
        );
        assert_eq!(
            Version::from_headers(&hv(&[("x-openstack-nova-api-version", "2.37")])).unwrap(),
            Version(37)
        );
        assert_eq!(
            Version::from_headers(&hv(&[("openstack-api-version", "compute latest")])).unwrap(),
            MAX
        );
        // The new header wins.
        assert_eq!(
            Version::from_headers(&hv(&[
                ("openstack-api-version", "compute 2.10"),
                ("x-openstack-nova-api-version", "2.20")
            ]))
            .unwrap(),
            Version(10)
        );
        // Another service's version is not ours.
        assert_eq!(
            Version::from_headers(&hv(&[("openstack-api-version", "placement 1.30")])).unwrap(),
            MIN
        );
    }

    #[test]
    fn refuses_out_of_range_and_garbage() {
        for bad in ["2.0", "2.105", "3.1", "1.1"] {
            let h = hv(&[(
                "x-openstack-nova-api-version",
                Box::leak(bad.to_owned().into_boxed_str()),
            )]);
            assert!(
                matches!(Version::from_headers(&h), Err(ApiError::NotAcceptable(_))),
                "{bad}"
            );
        }
        for bad in ["abc", "2", "2.x", ".1", "2.01", "02.1"] {
            let h = hv(&[(
                "x-openstack-nova-api-version",
                Box::leak(bad.to_owned().into_boxed_str()),
            )]);
            assert!(
                matches!(Version::from_headers(&h), Err(ApiError::BadRequest(_))),
                "{bad}"
            );
        }
    }
}
