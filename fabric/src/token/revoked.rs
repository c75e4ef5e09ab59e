//! The revocation set a [`super::TokenValidator`] checks every token
//! against: single tokens by audit id, and marks on every token issued up
//! to a time of a user, of a project, or of a user on a project.

use std::collections::HashMap;

use super::{Claims, Revocation};

/// A mark: (issued_before_ms, expires_at_ms), the latest of its key.
type Mark = (i64, i64);

const NONE: Mark = (i64::MIN, i64::MIN);

#[derive(Default)]
pub(super) struct Revoked {
    audit: HashMap<String, i64>,
    /// user id → mark.
    users: HashMap<String, Mark>,
    /// project id → mark, for everybody's tokens on it.
    projects: HashMap<String, Mark>,
    /// (user id, project id) → mark (a grant removed).
    grants: HashMap<(String, String), Mark>,
}

/// Raises `entry` to the later of its mark and `e`'s.
fn raise(entry: &mut Mark, e: &Revocation) {
    entry.0 = entry.0.max(e.issued_before_ms);
    entry.1 = entry.1.max(e.expires_at_ms);
}

/// Whether a mark revokes a token issued at `issued_at`.
fn covers(mark: Option<&Mark>, issued_at: i64) -> bool {
    mark.is_some_and(|(before, _)| issued_at <= *before)
}

impl Revoked {
    /// Adds one event.
    pub(super) fn add(&mut self, e: &Revocation) {
        if let Some(a) = &e.audit_id {
            self.audit.insert(a.clone(), e.expires_at_ms);
        }
        match (&e.user_id, &e.project_id) {
            (Some(u), None) => raise(self.users.entry(u.clone()).or_insert(NONE), e),
            (None, Some(p)) => raise(self.projects.entry(p.clone()).or_insert(NONE), e),
            (Some(u), Some(p)) => {
                raise(self.grants.entry((u.clone(), p.clone())).or_insert(NONE), e)
            }
            (None, None) => {}
        }
    }

    /// Whether a token with `claims` is revoked.
    pub(super) fn covers(&self, claims: &Claims) -> bool {
        let at = claims.issued_at_ms;
        if self.audit.contains_key(&claims.audit_id) || covers(self.users.get(&claims.user.id), at)
        {
            return true;
        }
        let Some(p) = &claims.project else {
            return false;
        };
        let project = &p.project.id;
        covers(self.projects.get(project), at)
            || (!self.grants.is_empty()
                && covers(
                    self.grants.get(&(claims.user.id.clone(), project.clone())),
                    at,
                ))
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{claims, ring};
    use super::super::{now_ms, Revocation, TokenError, TokenSigner};

    #[test]
    fn grant_and_project_revocations_take_the_tokens_they_cover() {
        let s = TokenSigner::from_seed("k1", &[1; 32]);
        let v = ring(&[&s]);
        let c = claims(60_000);
        let t = s.sign(&c);
        let event = |user: Option<&str>, project: Option<&str>, before: i64| Revocation {
            audit_id: None,
            user_id: user.map(Into::into),
            project_id: project.map(Into::into),
            issued_before_ms: before,
            expires_at_ms: now_ms() + 60_000,
        };
        let issued = c.issued_at_ms;
        // Another user's grant, another project, or marks older than the
        // token: untouched.
        v.set_revocations(&[
            event(Some("u2"), Some("p1"), issued),
            event(None, Some("p2"), issued),
            event(Some("u1"), Some("p2"), issued),
            event(Some("u1"), Some("p1"), issued - 1),
            event(None, Some("p1"), issued - 1),
        ]);
        assert!(v.validate(&t).is_ok());
        // u1's grant on p1 removed after the token was issued.
        v.set_revocations(&[event(Some("u1"), Some("p1"), issued)]);
        assert_eq!(v.validate(&t), Err(TokenError::Revoked));
        // p1 deleted: everybody's tokens on it.
        v.set_revocations(&[event(None, Some("p1"), issued)]);
        assert_eq!(v.validate(&t), Err(TokenError::Revoked));
        // An unscoped token of u1 is not covered by project events.
        let mut unscoped = claims(60_000);
        unscoped.project = None;
        assert!(v.validate(&s.sign(&unscoped)).is_ok());
        // A token issued after the mark (a new grant): valid.
        let mut later = claims(60_000);
        later.issued_at_ms = issued + 1;
        later.audit_id = "audit-later".into();
        v.set_revocations(&[event(Some("u1"), Some("p1"), issued)]);
        assert!(v.validate(&s.sign(&later)).is_ok());
    }
}
