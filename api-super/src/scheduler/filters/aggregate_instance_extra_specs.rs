//! `AggregateInstanceExtraSpecsFilter`: the flavor's extra specs match the
//! metadata of the host's aggregates. Keys scoped
//! `aggregate_instance_extra_specs:` and unscoped keys are checked (any
//! other scope is left to its own filter); a key passes when one of the
//! host's aggregates has a value for it that matches (see
//! [`extra_specs_match`]). A flavor without extra specs passes everywhere.

use super::Filter;
use crate::scheduler::{Candidate, Request};

/// The scope this filter reads.
pub const SCOPE: &str = "aggregate_instance_extra_specs";

/// Passes hosts whose aggregates satisfy the flavor's extra specs.
#[derive(Debug, Clone, Copy, Default)]
pub struct AggregateInstanceExtraSpecsFilter;

impl Filter for AggregateInstanceExtraSpecsFilter {
    fn name(&self) -> &'static str {
        "AggregateInstanceExtraSpecsFilter"
    }

    fn passes(&self, host: &Candidate, req: &Request) -> bool {
        for (key, wanted) in &req.flavor_extra_specs {
            let key = match key.split_once(':') {
                Some((scope, rest)) if scope == SCOPE => rest,
                Some(_) => continue,
                None => key.as_str(),
            };
            let Some(values) = host.info.aggregate_metadata.get(key) else {
                return false;
            };
            if !values.iter().any(|v| extra_specs_match(v, wanted)) {
                return false;
            }
        }
        true
    }
}

/// Nova's extra-specs operators: `value` (a host's) against `req` (the
/// flavor's), e.g. `"4"` against `">= 2"`, `"ssd"` against `"<in> ss"`.
/// Without an operator the strings must be equal.
pub fn extra_specs_match(value: &str, req: &str) -> bool {
    let words: Vec<&str> = req.split_whitespace().collect();
    let num = |s: &str| s.parse::<f64>().ok();
    let (op, rest) = match words.split_first() {
        Some((op, rest)) => (*op, rest),
        None => return value == req,
    };
    let arg = rest.join(" ");
    let cmp_num = |f: fn(f64, f64) -> bool| match (num(value), num(&arg)) {
        (Some(a), Some(b)) => f(a, b),
        _ => false,
    };
    match op {
        "=" => cmp_num(|a, b| a >= b),
        "==" => cmp_num(|a, b| a == b),
        "!=" => cmp_num(|a, b| a != b),
        ">=" => cmp_num(|a, b| a >= b),
        "<=" => cmp_num(|a, b| a <= b),
        "s==" => value == arg,
        "s!=" => value != arg,
        "s>=" => value >= arg.as_str(),
        "s>" => value > arg.as_str(),
        "s<=" => value <= arg.as_str(),
        "s<" => value < arg.as_str(),
        "<in>" => value.contains(arg.as_str()),
        "<all-in>" => rest.iter().all(|w| value.contains(w)),
        "<or>" => rest.iter().filter(|w| **w != "<or>").any(|w| *w == value),
        _ => value == req,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operators_as_nova() {
        assert!(extra_specs_match("true", "true"));
        assert!(!extra_specs_match("false", "true"));
        assert!(extra_specs_match("4", ">= 2"));
        assert!(!extra_specs_match("1", ">= 2"));
        assert!(extra_specs_match("4", "= 4"));
        assert!(extra_specs_match("8", "= 4"), "= is at least, as Nova");
        assert!(extra_specs_match("ssd-fast", "<in> ssd"));
        assert!(extra_specs_match("ssd", "s== ssd"));
        assert!(!extra_specs_match("hdd", "s== ssd"));
        assert!(extra_specs_match("b", "<or> a <or> b"));
        assert!(!extra_specs_match("c", "<or> a <or> b"));
        assert!(!extra_specs_match("x", "== 2"), "not a number");
    }
}
