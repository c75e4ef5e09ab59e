//! The policy engine every API shares: oslo.policy's rule language (the
//! subset the default rules use) and overrides from a policy file. Each
//! service keeps its own default rules and builds its [`Policy`] with
//! [`Policy::from_defaults`].
//!
//! Rule language: `@` (always), `!` (never), `role:NAME`, `rule:NAME`,
//! `is_admin:True`, `CRED:%(TARGET)s` (a credential equals a target value),
//! `CRED:literal`, combined with `and`, `or`, `not` and parentheses.
//! Credentials: `user_id`, `project_id`, `domain_id` (the project's domain),
//! `token.project.domain.id`, `token.user.domain.id`, `system_scope` (never
//! set: system scope is not supported).
//!
//! Roles are hierarchical through implied roles (admin ⇒ member ⇒ reader),
//! expanded when the token is issued, so `role:reader` holds for a member.
//!
//! Policy file: YAML (`"rule name": "check string"` per line, as
//! `oslo.policy` writes them) or JSON (a flat object), by extension.
//! A rule in the file replaces the default of the same name.
//!
//! Evaluation is three-valued: an undefined rule, an unknown credential or
//! a target attribute not given is unknown, `not` keeps it unknown, and
//! only a known true allows.
//!
//! Every denial is logged at `warn` on the `audit` target with the user,
//! project, action and request id. Never a token.

use std::collections::HashMap;
use std::path::Path;

use crate::token::Claims;

/// A parsed rule.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Expr {
    Always,
    Never,
    Role(String),
    Rule(String),
    IsAdmin(bool),
    /// credential key, target key
    Match(String, String),
    /// credential key, literal
    Literal(String, String),
    Not(Box<Expr>),
    And(Vec<Expr>),
    Or(Vec<Expr>),
}

/// A rule that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("policy rule {name:?}: {message}")]
pub struct PolicyError {
    /// The rule.
    pub name: String,
    /// What is wrong.
    pub message: String,
}

/// Splits a rule into words and parentheses; `%(key)s` stays in its word.
fn tokenize(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    for word in s.split_whitespace() {
        let mut w = word;
        while let Some(rest) = w.strip_prefix('(') {
            out.push("(".to_owned());
            w = rest;
        }
        let mut closing = 0;
        while let Some(rest) = w.strip_suffix(')') {
            closing += 1;
            w = rest;
        }
        if !w.is_empty() {
            out.push(w.to_owned());
        }
        out.extend(std::iter::repeat_n(")".to_owned(), closing));
    }
    out
}

struct Parser {
    toks: Vec<String>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> Option<&str> {
        self.toks.get(self.pos).map(String::as_str)
    }
    fn next(&mut self) -> Option<String> {
        let t = self.toks.get(self.pos).cloned();
        self.pos += 1;
        t
    }
    fn or(&mut self) -> Result<Expr, String> {
        let mut v = vec![self.and()?];
        while self.peek() == Some("or") {
            self.pos += 1;
            v.push(self.and()?);
        }
        Ok(if v.len() == 1 {
            v.remove(0)
        } else {
            Expr::Or(v)
        })
    }
    fn and(&mut self) -> Result<Expr, String> {
        let mut v = vec![self.not()?];
        while self.peek() == Some("and") {
            self.pos += 1;
            v.push(self.not()?);
        }
        Ok(if v.len() == 1 {
            v.remove(0)
        } else {
            Expr::And(v)
        })
    }
    fn not(&mut self) -> Result<Expr, String> {
        if self.peek() == Some("not") {
            self.pos += 1;
            return Ok(Expr::Not(Box::new(self.not()?)));
        }
        self.atom()
    }
    fn atom(&mut self) -> Result<Expr, String> {
        let t = self.next().ok_or("unexpected end of rule")?;
        if t == "(" {
            let e = self.or()?;
            if self.next().as_deref() != Some(")") {
                return Err("missing )".into());
            }
            return Ok(e);
        }
        check(&t)
    }
}

fn check(t: &str) -> Result<Expr, String> {
    match t {
        "@" => return Ok(Expr::Always),
        "!" => return Ok(Expr::Never),
        _ => {}
    }
    let (kind, value) = t
        .split_once(':')
        .ok_or_else(|| format!("{t:?} is not a check"))?;
    Ok(match kind {
        "role" => Expr::Role(value.to_ascii_lowercase()),
        "rule" => Expr::Rule(value.to_owned()),
        "is_admin" => Expr::IsAdmin(value.eq_ignore_ascii_case("true")),
        _ => match value.strip_prefix("%(").and_then(|v| v.strip_suffix(")s")) {
            Some(target) => Expr::Match(kind.to_owned(), target.to_owned()),
            None => Expr::Literal(
                kind.to_owned(),
                value.trim_matches(|c| c == '\'' || c == '"').to_owned(),
            ),
        },
    })
}

fn parse(name: &str, rule: &str) -> Result<Expr, PolicyError> {
    let toks = tokenize(rule);
    if toks.is_empty() {
        // oslo.policy: an empty rule always passes.
        return Ok(Expr::Always);
    }
    let mut p = Parser { toks, pos: 0 };
    let e = p.or().map_err(|message| PolicyError {
        name: name.to_owned(),
        message,
    })?;
    if p.pos != p.toks.len() {
        return Err(PolicyError {
            name: name.to_owned(),
            message: format!("unexpected {:?}", p.toks[p.pos]),
        });
    }
    Ok(e)
}

/// Values of the target of an action (`project_id`, `target.user.id`, ...).
pub type Target<'a> = &'a [(&'a str, &'a str)];

/// A set of rules.
#[derive(Debug, Clone)]
pub struct Policy {
    rules: HashMap<String, Expr>,
}

impl Policy {
    /// A policy of `defaults` (each a service's default rules, in code:
    /// a default that does not parse is a bug, and panics).
    pub fn from_defaults(defaults: &[&[(&str, &str)]]) -> Self {
        let mut rules = HashMap::new();
        for (name, rule) in defaults.iter().flat_map(|d| d.iter()) {
            rules.insert(
                (*name).to_owned(),
                parse(name, rule).expect("default rules parse"),
            );
        }
        Self { rules }
    }

    /// Replaces rules by those given (name, check string).
    pub fn with_overrides<'a>(
        mut self,
        overrides: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, PolicyError> {
        for (name, rule) in overrides {
            self.rules.insert(name.to_owned(), parse(name, rule)?);
        }
        Ok(self)
    }

    /// These rules with the overrides of the policy file at `path` (YAML or
    /// JSON, by extension).
    pub fn with_file(self, path: &Path) -> Result<Self, PolicyError> {
        let text = std::fs::read_to_string(path).map_err(|e| PolicyError {
            name: path.display().to_string(),
            message: e.to_string(),
        })?;
        let pairs = if path.extension().is_some_and(|e| e == "json") {
            let map: HashMap<String, String> =
                serde_json::from_str(&text).map_err(|e| PolicyError {
                    name: path.display().to_string(),
                    message: e.to_string(),
                })?;
            map.into_iter().collect::<Vec<_>>()
        } else {
            parse_yaml(&text).map_err(|message| PolicyError {
                name: path.display().to_string(),
                message,
            })?
        };
        self.with_overrides(pairs.iter().map(|(a, b)| (a.as_str(), b.as_str())))
    }

    /// These rules, with those of the file `policy_file` when it is not
    /// empty.
    pub fn with_policy_file(self, policy_file: &str) -> Result<Self, PolicyError> {
        if policy_file.is_empty() {
            Ok(self)
        } else {
            self.with_file(Path::new(policy_file))
        }
    }

    /// Whether `claims` may perform `action` on `target`.
    pub fn allows(&self, action: &str, claims: &Claims, target: Target<'_>) -> bool {
        match self.rules.get(action) {
            Some(e) => self.eval(e, claims, target, 0) == Some(true),
            None => {
                tracing::error!(action, "no policy rule; denying");
                false
            }
        }
    }

    /// [`Policy::allows`], logging a denial on the `audit` target.
    pub fn enforce(
        &self,
        action: &str,
        claims: &Claims,
        target: Target<'_>,
        request_id: &str,
    ) -> bool {
        let ok = self.allows(action, claims, target);
        if !ok {
            tracing::warn!(
                target: "audit",
                user_id = %claims.user.id,
                user = %claims.user.name,
                project_id = claims.project_id().unwrap_or("-"),
                action,
                request_id,
                "policy denied"
            );
        }
        ok
    }

    /// A rule's value, or `None` when it cannot be known: a rule that is
    /// not defined, a credential this engine does not know, a target
    /// attribute the call does not give. Unknown stays unknown under
    /// `not` (Kleene's logic), and only a known `true` allows, so an
    /// unknown never grants: `not rule:missing` denies (oslo.policy
    /// would allow it).
    fn eval(&self, e: &Expr, c: &Claims, target: Target<'_>, depth: u32) -> Option<bool> {
        if depth > 32 {
            return None;
        }
        match e {
            Expr::Always => Some(true),
            Expr::Never => Some(false),
            Expr::Role(r) => Some(c.roles.iter().any(|x| x.name.eq_ignore_ascii_case(r))),
            Expr::Rule(name) => match self.rules.get(name) {
                Some(r) => self.eval(r, c, target, depth + 1),
                None => {
                    tracing::warn!(rule = %name, "policy names a rule that is not defined; unknown");
                    None
                }
            },
            Expr::IsAdmin(want) => Some(c.has_role("admin") == *want),
            Expr::Match(cred, key) => {
                let have = credential(c, cred)?;
                let want = target.iter().find(|(k, _)| k == key).map(|(_, v)| *v)?;
                Some(have == want)
            }
            Expr::Literal(cred, value) => credential(c, cred).map(|h| h == value),
            Expr::Not(inner) => self.eval(inner, c, target, depth + 1).map(|v| !v),
            Expr::And(v) => {
                let mut unknown = false;
                for x in v {
                    match self.eval(x, c, target, depth + 1) {
                        Some(false) => return Some(false),
                        None => unknown = true,
                        Some(true) => {}
                    }
                }
                (!unknown).then_some(true)
            }
            Expr::Or(v) => {
                let mut unknown = false;
                for x in v {
                    match self.eval(x, c, target, depth + 1) {
                        Some(true) => return Some(true),
                        None => unknown = true,
                        Some(false) => {}
                    }
                }
                (!unknown).then_some(false)
            }
        }
    }
}

fn credential<'c>(c: &'c Claims, key: &str) -> Option<&'c str> {
    match key {
        "user_id" | "token.user_id" | "token.user.id" => Some(&c.user.id),
        "project_id" | "token.project.id" => c.project_id(),
        "domain_id" | "project_domain_id" | "token.project.domain.id" => {
            c.project.as_ref().map(|p| p.domain.id.as_str())
        }
        "user_domain_id" | "token.user.domain.id" => Some(&c.user_domain.id),
        _ => None,
    }
}

/// Reads oslo.policy's YAML: one `"name": "rule"` mapping per line,
/// comments with `#`.
fn parse_yaml(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line == "---" {
            continue;
        }
        let (key, rest) = if let Some(q) = line.chars().next().filter(|c| *c == '"' || *c == '\'') {
            let end = line[1..]
                .find(q)
                .ok_or_else(|| format!("line {}: unterminated quote", n + 1))?;
            (line[1..1 + end].to_owned(), line[end + 2..].trim_start())
        } else {
            let i = line
                .find(": ")
                .ok_or_else(|| format!("line {}: expected \"name\": \"rule\"", n + 1))?;
            (line[..i].to_owned(), &line[i..])
        };
        let value = rest
            .strip_prefix(':')
            .ok_or_else(|| format!("line {}: expected ':'", n + 1))?
            .trim();
        let value = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
            .unwrap_or(value);
        out.push((key, value.to_owned()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::{Named, ProjectScope};

    fn claims(roles: &[&str], project: &str) -> Claims {
        let n = |s: &str| Named {
            id: s.into(),
            name: s.into(),
        };
        Claims {
            user: n("u1"),
            user_domain: n("default"),
            project: Some(ProjectScope {
                project: n(project),
                domain: n("default"),
            }),
            roles: roles.iter().map(|r| n(r)).collect(),
            methods: vec!["password".into()],
            issued_at_ms: 0,
            expires_at_ms: i64::MAX,
            audit_id: "a".into(),
            parent_audit_id: None,
        }
    }

    #[test]
    fn overrides_from_yaml_and_grammar() {
        let dir = std::env::temp_dir().join(format!("policy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("policy.yaml");
        std::fs::write(
            &f,
            "# ours\n\"os_compute_api:os-services:list\": \"role:reader\"\n'x': 'not (role:a or role:b) and @'\n",
        )
        .unwrap();
        let defaults: &[(&str, &str)] = &[("os_compute_api:os-services:list", "role:admin")];
        let p = Policy::from_defaults(&[defaults]).with_file(&f).unwrap();
        let reader = claims(&["reader"], "p1");
        assert!(p.allows("os_compute_api:os-services:list", &reader, &[]));
        assert!(p.allows("x", &reader, &[]));
        assert!(!p.allows("x", &claims(&["b"], "p1"), &[]));
        assert!(parse("bad", "role:a and (").is_err());
        // An unknown never grants, not even under `not`.
        let mut p = p;
        for (name, rule) in [
            ("not_missing", "not rule:missing"),
            ("not_absent", "not project_id:%(absent)s"),
            ("not_unknown_cred", "not shoe_size:42"),
            ("missing_or_admin", "rule:missing or role:admin"),
            ("missing_and_never", "rule:missing and !"),
        ] {
            p.rules.insert(name.into(), parse(name, rule).unwrap());
        }
        let admin = claims(&["admin"], "p1");
        for name in ["not_missing", "not_absent", "not_unknown_cred"] {
            assert!(!p.allows(name, &admin, &[]), "{name}");
        }
        assert!(p.allows("missing_or_admin", &admin, &[]));
        assert!(!p.allows("missing_or_admin", &reader, &[]));
        assert!(!p.allows("missing_and_never", &admin, &[]));
        assert!(parse("bad", "role:a role:b").is_err());
        let _ = std::fs::remove_dir_all(dir);
    }
}
